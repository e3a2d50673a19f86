// Nested module: the CI tool that runs go test -json and judges it. A
// tool, not a test; it needs nothing outside the standard library, and
// embedders of pkg/endpoint do not build it.
module github.com/quantyroot/quantykube/test/ci/testcheck

go 1.26.0
