// Package runtime is the root of the pieces every Baton binary shares:
// flagenv (flags mirrored from the environment, and comma-separated list
// flags), serve (the gRPC and HTTP servers with health, reflection,
// metrics, TLS and graceful stop, the logger, and Main), trust (the TLS
// flags every binary takes, and the refusal of plaintext beyond loopback),
// authz (the role table, the --authz-policy file, and the interceptors
// and HTTP middleware that enforce them, which serve installs under mutual
// TLS), limits (the per-client call limits) and rpcmetrics (the gRPC
// server's call and message counters, under the standard grpc_server_*
// names). It holds no code of its own.
package runtime
