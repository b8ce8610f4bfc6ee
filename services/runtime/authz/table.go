package authz

import (
	"strings"

	"github.com/batonrun/baton/client/tlsfiles"
	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
)

// queueWork is the work stream, the one QueueService method whose queue
// is named by its first message rather than by its request.
const queueWork = queuev1.QueueService_Work_FullMethodName

// service is a gRPC service whose methods a policy may name.
type service struct {
	name    string   // full name, "baton.queue.v1.QueueService"
	short   string   // as messages name it, "QueueService"
	methods []string // full method names, "/baton.queue.v1.QueueService/Add"
	// queued is true when every request of the service names a queue (its
	// first message, for a stream): a rule may restrict its methods to
	// queues.
	queued bool
}

// services are the services a policy may name, and every method of
// theirs: a method not listed here is refused to everyone (fail closed).
var services = []service{
	{
		name:  queuev1.QueueService_ServiceDesc.ServiceName,
		short: "QueueService",
		methods: []string{
			queuev1.QueueService_Add_FullMethodName,
			queuev1.QueueService_Lease_FullMethodName,
			queuev1.QueueService_Ack_FullMethodName,
			queuev1.QueueService_Extend_FullMethodName,
			queueWork,
			queuev1.QueueService_Forget_FullMethodName,
			queuev1.QueueService_Inspect_FullMethodName,
			queuev1.QueueService_List_FullMethodName,
			queuev1.QueueService_Stats_FullMethodName,
		},
		queued: true,
	},
	{
		name:  observerv1.ObserverService_ServiceDesc.ServiceName,
		short: "ObserverService",
		methods: []string{
			observerv1.ObserverService_Get_FullMethodName,
			observerv1.ObserverService_List_FullMethodName,
			observerv1.ObserverService_Status_FullMethodName,
		},
	},
	{
		name:  queuev1.ClusterService_ServiceDesc.ServiceName,
		short: "ClusterService",
		methods: []string{
			queuev1.ClusterService_MemberList_FullMethodName,
			queuev1.ClusterService_MemberAdd_FullMethodName,
			queuev1.ClusterService_MemberRemove_FullMethodName,
			queuev1.ClusterService_MoveLeader_FullMethodName,
			queuev1.ClusterService_Snapshot_FullMethodName,
			queuev1.ClusterService_Status_FullMethodName,
		},
	},
	{
		name:    queuev1.RaftService_ServiceDesc.ServiceName,
		short:   "RaftService",
		methods: []string{queuev1.RaftService_Send_FullMethodName, queuev1.RaftService_SendSnapshot_FullMethodName, queuev1.RaftService_Join_FullMethodName, queuev1.RaftService_Publish_FullMethodName},
	},
}

// openServices may be called by every client with a verified certificate,
// whatever its roles and whatever the policy: health checks and server
// reflection (grpcurl, batonctl's discovery).
var openServices = []string{
	healthpb.Health_ServiceDesc.ServiceName,
	reflectionv1.ServerReflection_ServiceDesc.ServiceName,
	reflectionv1alpha.ServerReflection_ServiceDesc.ServiceName,
}

// openPaths are the HTTP paths served to anyone, with or without a client
// certificate: probes (a kubelet's sends none).
var openPaths = []string{"/healthz", "/readyz"}

// defaultRules is the role table of docs/design.md, "Trust", row by row.
func defaultRules() []Rule {
	const (
		observer  = tlsfiles.RoleObserver
		worker    = tlsfiles.RoleWorker
		viewer    = tlsfiles.RoleViewer
		admin     = tlsfiles.RoleAdmin
		queuePeer = tlsfiles.RoleQueuePeer
	)
	return []Rule{
		{
			Roles:   []string{observer, admin},
			Methods: []string{queuev1.QueueService_Add_FullMethodName},
		},
		{
			Roles: []string{worker, admin},
			Methods: []string{
				queuev1.QueueService_Lease_FullMethodName,
				queuev1.QueueService_Ack_FullMethodName,
				queuev1.QueueService_Extend_FullMethodName,
				queueWork,
			},
		},
		{
			Roles: []string{viewer, worker, observer, admin},
			Methods: []string{
				queuev1.QueueService_Inspect_FullMethodName,
				queuev1.QueueService_List_FullMethodName,
				queuev1.QueueService_Stats_FullMethodName,
			},
		},
		{
			Roles:   []string{admin},
			Methods: []string{queuev1.QueueService_Forget_FullMethodName},
		},
		{
			Roles: []string{worker, viewer, admin},
			Methods: []string{
				observerv1.ObserverService_Get_FullMethodName,
				observerv1.ObserverService_List_FullMethodName,
			},
		},
		{
			// The queue's dashboard shows the observer's status (the
			// queue's --observer-addr), asked with the queue's own
			// certificate; the cache's objects stay out of its reach.
			Roles:   []string{worker, viewer, admin, queuePeer},
			Methods: []string{observerv1.ObserverService_Status_FullMethodName},
		},
		{
			Roles: []string{viewer, admin, queuePeer},
			Methods: []string{
				queuev1.ClusterService_MemberList_FullMethodName,
				queuev1.ClusterService_Status_FullMethodName,
			},
		},
		{
			Roles: []string{admin},
			Methods: []string{
				queuev1.ClusterService_MemberAdd_FullMethodName,
				queuev1.ClusterService_MemberRemove_FullMethodName,
				queuev1.ClusterService_MoveLeader_FullMethodName,
				queuev1.ClusterService_Snapshot_FullMethodName,
			},
		},
		{
			// Raft's messages between the queue's members: a member's
			// certificate, and no one else's, not even an admin's (an
			// admin changes membership through ClusterService; a forged
			// vote or append would corrupt the log).
			Roles:   []string{queuePeer},
			Methods: []string{queuev1.RaftService_Send_FullMethodName, queuev1.RaftService_SendSnapshot_FullMethodName, queuev1.RaftService_Join_FullMethodName, queuev1.RaftService_Publish_FullMethodName},
		},
		{
			Roles: []string{viewer, admin},
			Paths: []string{"/metrics", "/"},
		},
		{
			Roles: []string{admin},
			Paths: []string{"/debug/pprof/"},
		},
	}
}

// splitMethod splits a full method name, "/pkg.Service/Method", into the
// service's full name and the method's; ok is false for any other shape.
func splitMethod(full string) (svc, method string, ok bool) {
	rest, ok := strings.CutPrefix(full, "/")
	if !ok {
		return "", "", false
	}
	svc, method, ok = strings.Cut(rest, "/")
	if !ok || svc == "" || method == "" || strings.Contains(method, "/") {
		return "", "", false
	}
	return svc, method, true
}

// findService returns the service of a full service name.
func findService(name string) (*service, bool) {
	for i := range services {
		if services[i].name == name {
			return &services[i], true
		}
	}
	return nil, false
}

// isOpenMethod reports whether full is a method of an open service.
func isOpenMethod(full string) bool {
	svc, _, ok := splitMethod(full)
	if !ok {
		return false
	}
	for _, s := range openServices {
		if s == svc {
			return true
		}
	}
	return false
}

// isQueued reports whether full is a method whose requests name a queue.
func isQueued(full string) bool {
	svc, _, ok := splitMethod(full)
	if !ok {
		return false
	}
	s, ok := findService(svc)
	return ok && s.queued
}
