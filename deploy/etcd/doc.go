// Package etcd pins the etcd server and etcdctl that the baton/etcd image
// ships. It has no code: go.mod names both commands as tool dependencies at
// the version Baton is tested against (v3.6.16), so scripts/images.sh can
// build them statically with
//
//	CGO_ENABLED=0 go build -trimpath -o bin/etcd go.etcd.io/etcd/server/v3
//	CGO_ENABLED=0 go build -trimpath -o bin/etcdctl go.etcd.io/etcd/etcdctl/v3
//
// `go install go.etcd.io/etcd/server/v3@v3.6.16` is refused because etcd's own
// go.mod has replace directives; requiring the modules from ours sidesteps
// that, and go.sum fixes every byte that goes into the image.
package etcd
