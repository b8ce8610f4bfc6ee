// Package runtime is the root of the pieces every Baton binary shares:
// flagenv (flags mirrored from the environment, and comma-separated list
// flags) and serve (the gRPC and HTTP servers with health, reflection,
// metrics and graceful stop, the logger, and Main). It holds no code of its
// own.
package runtime
