// Package sdk tests the worker SDK (the module github.com/batonrun/baton/sdk)
// against real parts: its packages' tests here run an embedded etcd or the
// baton-queue binary (test/framework), which the SDK's own module must not
// require, since a controller's module that depends on the SDK would then
// require them too. The tests beside the SDK's code need nothing running.
//
// The test in this package follows docs/workers.md's "Depending on the SDK"
// word for word in a module outside the repository, so that the section
// and what a user gets cannot drift apart, and runs the program it builds
// against an etcd that requires mutual TLS (the SDK's etcdconn).
package sdk
