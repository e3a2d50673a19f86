// Package client is how the plugin reaches a cluster: the three things it
// asks of one (Interface), and their one implementation, the kubectl on
// PATH (Kubectl), run with the kubectl flags the user gave. Everything the
// commands know of a cluster goes through an Interface, so that a command
// is tested with a fake one.
package client

import "context"

// Interface is what the plugin asks of a cluster.
type Interface interface {
	// Get is a GET of path (with its query) from kube-apiserver, as
	// kubectl get --raw sends it: the answer's body, unchanged.
	Get(ctx context.Context, path string) ([]byte, error)
	// Post is a POST of body to path, as kubectl create --raw -f - sends
	// it: the answer's body, unchanged.
	Post(ctx context.Context, path string, body []byte) ([]byte, error)
	// ContextNamespace is the namespace kubectl would use without -n: the
	// current context's, or "default".
	ContextNamespace(ctx context.Context) (string, error)
}

// StatusError is a request the API server answered with an error: its
// Status's reason (apimachinery's StatusReason: Forbidden, NotFound,
// Expired, Invalid, ...) and message, as kubectl prints them.
type StatusError struct {
	Reason  string
	Message string
}

func (e *StatusError) Error() string { return e.Message }
