// Package v35 pins etcd v3.5, the oldest etcd Baton supports, for the
// compatibility run (scripts/etcd-compat.sh): the observer's tests run
// against this etcd server binary as a separate process. It has no code;
// go.mod names the server as a tool dependency, so the build is
//
//	CGO_ENABLED=0 go build -o etcd go.etcd.io/etcd/server/v3
package v35
