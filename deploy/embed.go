// Package deploy holds the Kubernetes objects an operator applies to
// register QuantyKube's aggregated API, as text/template files that
// `quantykube apiservice` fills in and prints (docs/AGGREGATED-API.md).
package deploy

import "embed"

// AggregatedAPI is the aggregated-api folder.
//
//go:embed aggregated-api/*.yaml
var AggregatedAPI embed.FS
