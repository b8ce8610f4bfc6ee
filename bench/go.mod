module github.com/batonrun/baton/bench

go 1.26.0

replace (
	github.com/batonrun/baton/proto => ../proto
	github.com/batonrun/baton/services/queue => ../services/queue
	github.com/batonrun/baton/services/runtime => ../services/runtime
)

require (
	github.com/batonrun/baton/proto v0.0.0-00010101000000-000000000000
	github.com/batonrun/baton/services/queue v0.0.0-00010101000000-000000000000
	google.golang.org/grpc v1.85.0
	k8s.io/client-go v0.37.2
)

require (
	github.com/go-logr/logr v1.4.4 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	golang.org/x/time v0.15.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	k8s.io/apimachinery v0.37.2 // indirect
	k8s.io/klog/v2 v2.140.0 // indirect
	k8s.io/utils v0.0.0-20260626114624-be93311217bd // indirect
)
