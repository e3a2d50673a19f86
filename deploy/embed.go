// Package deploy holds the Kubernetes objects an operator applies to
// register QuantyKube's aggregated API, as templates whose {{.Field}}
// placeholders `quantykube apiservice` fills in before printing them
// (docs/AGGREGATED-API.md).
package deploy

import "embed"

// AggregatedAPI is the aggregated-api folder.
//
//go:embed aggregated-api/*.yaml
var AggregatedAPI embed.FS
