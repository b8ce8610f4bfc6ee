// Package runtime is the root of the pieces every Baton binary shares:
// flagenv (flags mirrored from the environment), serve (the gRPC and HTTP
// servers with health, reflection, metrics and graceful stop) and etcdtest
// (an embedded etcd for tests). It holds no code of its own.
package runtime
