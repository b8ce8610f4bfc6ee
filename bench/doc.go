// Package bench is the root of Baton's benchmark harness, a module of its
// own so the services never depend on what it compares them with (client-go's
// in-memory workqueue). cmd/batonbench runs every figure of `make bench`
// against a real baton-queue process over loopback, measures in the same run
// the physical references the targets are ratios of, prints one table,
// writes the records as JSON and regenerates docs/benchmarks.md.
package bench
