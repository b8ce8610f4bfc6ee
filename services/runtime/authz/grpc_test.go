package authz

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonrun/baton/client/tlsfiles"
	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/emptypb"
)

// server is a gRPC server on 127.0.0.1 whose every Baton method (the
// generated ones, and Work, hand-registered) only counts
// that its handler ran, behind the Authorizer's interceptors.
type server struct {
	addr  string
	pki   *pki
	reg   *prometheus.Registry
	logs  *logBuffer
	calls atomic.Int64 // handlers run (for Work: first messages received)
}

// startServer serves on 127.0.0.1:0 with the CA of p asking for client
// certificates as mode says, until the test ends.
func startServer(t *testing.T, p *pki, policy *Policy, mode tlsfiles.ClientCerts) *server {
	t.Helper()
	s := &server{pki: p, reg: prometheus.NewRegistry(), logs: &logBuffer{}}
	a, err := New(Options{
		Policy:     policy,
		Logger:     slog.New(slog.NewJSONHandler(s.logs, nil)),
		Registerer: s.reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	creds, err := p.source(t, "queue").ServerCredentials(mode)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(creds),
		grpc.ChainUnaryInterceptor(a.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(a.StreamServerInterceptor()))
	s.register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = lis.Addr().String()
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return s
}

// register registers QueueService (with Work), ObserverService,
// ClusterService, RaftService, health and reflection.
func (s *server) register(srv *grpc.Server) {
	queue := grpc.ServiceDesc{
		ServiceName: queuev1.QueueService_ServiceDesc.ServiceName,
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName:    "Work",
			ClientStreams: true,
			ServerStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				if err := ss.RecvMsg(dynamicpb.NewMessage(workRequestDesc)); err != nil {
					return err
				}
				s.calls.Add(1)
				return ss.SendMsg(&emptypb.Empty{})
			},
		}},
	}
	for _, m := range []struct {
		name string
		req  proto.Message
	}{
		{"Add", &queuev1.AddRequest{}},
		{"Lease", &queuev1.LeaseRequest{}},
		{"Ack", &queuev1.AckRequest{}},
		{"Extend", &queuev1.ExtendRequest{}},
		{"Forget", &queuev1.ForgetRequest{}},
		{"Inspect", &queuev1.InspectRequest{}},
		{"List", &queuev1.ListRequest{}},
		{"Stats", &queuev1.StatsRequest{}},
	} {
		queue.Methods = append(queue.Methods, s.unary(queue.ServiceName, m.name, m.req))
	}
	observer := grpc.ServiceDesc{
		ServiceName: observerv1.ObserverService_ServiceDesc.ServiceName,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			s.unary(observerv1.ObserverService_ServiceDesc.ServiceName, "Get", &observerv1.GetRequest{}),
			s.unary(observerv1.ObserverService_ServiceDesc.ServiceName, "List", &observerv1.ListRequest{}),
			s.unary(observerv1.ObserverService_ServiceDesc.ServiceName, "Status", &observerv1.StatusRequest{}),
		},
	}
	cluster := grpc.ServiceDesc{
		ServiceName: queuev1.ClusterService_ServiceDesc.ServiceName,
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName:    "Snapshot",
			ServerStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				if err := ss.RecvMsg(&queuev1.SnapshotRequest{}); err != nil {
					return err
				}
				s.calls.Add(1)
				return ss.SendMsg(&queuev1.SnapshotResponse{})
			},
		}},
	}
	for _, m := range []struct {
		name string
		req  proto.Message
	}{
		{"MemberList", &queuev1.MemberListRequest{}},
		{"MemberAdd", &queuev1.MemberAddRequest{}},
		{"MemberRemove", &queuev1.MemberRemoveRequest{}},
		{"MoveLeader", &queuev1.MoveLeaderRequest{}},
		{"Status", &queuev1.StatusRequest{}},
	} {
		cluster.Methods = append(cluster.Methods, s.unary(cluster.ServiceName, m.name, m.req))
	}
	raft := grpc.ServiceDesc{
		ServiceName: queuev1.RaftService_ServiceDesc.ServiceName,
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName:    "Send",
			ClientStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				if err := ss.RecvMsg(&queuev1.SendRequest{}); err != nil {
					return err
				}
				s.calls.Add(1)
				return ss.SendMsg(&queuev1.SendResponse{})
			},
		}, {
			StreamName:    "SendSnapshot",
			ClientStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				if err := ss.RecvMsg(&queuev1.SendSnapshotRequest{}); err != nil {
					return err
				}
				s.calls.Add(1)
				return ss.SendMsg(&queuev1.SendSnapshotResponse{})
			},
		}},
		Methods: []grpc.MethodDesc{
			s.unary(queuev1.RaftService_ServiceDesc.ServiceName, "Join", &queuev1.JoinRequest{}),
			s.unary(queuev1.RaftService_ServiceDesc.ServiceName, "Publish", &queuev1.PublishRequest{}),
		},
	}
	for _, d := range []*grpc.ServiceDesc{&queue, &observer, &cluster, &raft} {
		srv.RegisterService(d, struct{}{})
	}
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
}

// unary is a method whose handler decodes a req like the generated code,
// counts, and answers Empty.
func (s *server) unary(svc, name string, req proto.Message) grpc.MethodDesc {
	full := "/" + svc + "/" + name
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := req.ProtoReflect().New().Interface()
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(context.Context, any) (any, error) {
				s.calls.Add(1)
				return &emptypb.Empty{}, nil
			}
			if ic == nil {
				return h(ctx, in)
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, h)
		},
	}
}

// dial returns a connection that presents src's certificate.
func (s *server) dial(t *testing.T, src *tlsfiles.Source) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(src.ClientCredentials("")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// workRequestDesc is a message shaped as docs/design.md's WorkRequest (a
// oneof whose first message is open {queue, …}), until the generated one
// exists.
var workRequestDesc = func() protoreflect.MessageDescriptor {
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	msg := descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:    proto.String("authztest/work.proto"),
		Package: proto.String("authztest"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("WorkOpen"), Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("queue"), Number: proto.Int32(1), Type: str, Label: opt, JsonName: proto.String("queue")},
				{Name: proto.String("worker"), Number: proto.Int32(2), Type: str, Label: opt, JsonName: proto.String("worker")},
			}},
			{Name: proto.String("WorkAck"), Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("key"), Number: proto.Int32(1), Type: str, Label: opt, JsonName: proto.String("key")},
			}},
			{
				Name: proto.String("WorkRequest"),
				Field: []*descriptorpb.FieldDescriptorProto{
					{Name: proto.String("open"), Number: proto.Int32(1), Type: msg, TypeName: proto.String(".authztest.WorkOpen"), Label: opt, OneofIndex: proto.Int32(0), JsonName: proto.String("open")},
					{Name: proto.String("ack"), Number: proto.Int32(2), Type: msg, TypeName: proto.String(".authztest.WorkAck"), Label: opt, OneofIndex: proto.Int32(0), JsonName: proto.String("ack")},
				},
				OneofDecl: []*descriptorpb.OneofDescriptorProto{{Name: proto.String("kind")}},
			},
		},
	}, nil)
	if err != nil {
		panic(err)
	}
	return fd.Messages().ByName("WorkRequest")
}()

// workOpen returns a WorkRequest whose open names queue.
func workOpen(queue string) *dynamicpb.Message {
	req := dynamicpb.NewMessage(workRequestDesc)
	openFD := workRequestDesc.Fields().ByName("open")
	open := dynamicpb.NewMessage(openFD.Message())
	open.Set(openFD.Message().Fields().ByName("queue"), protoreflect.ValueOfString(queue))
	req.Set(openFD, protoreflect.ValueOfMessage(open))
	return req
}

// workAck returns a WorkRequest that is an ack (no queue).
func workAck() *dynamicpb.Message {
	req := dynamicpb.NewMessage(workRequestDesc)
	ackFD := workRequestDesc.Fields().ByName("ack")
	req.Set(ackFD, protoreflect.ValueOfMessage(dynamicpb.NewMessage(ackFD.Message())))
	return req
}

// callQueue is the queue every QueueService call of the table test names.
const callQueue = "jobs"

// call calls method on conn as a client would, with a request naming
// queue (for a QueueService method), and returns the call's error.
func call(ctx context.Context, conn *grpc.ClientConn, method, queue string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	switch {
	case method == queueWork:
		return callWork(ctx, conn, workOpen(queue))
	case method == queuev1.RaftService_Send_FullMethodName:
		st, err := queuev1.NewRaftServiceClient(conn).Send(ctx)
		if err != nil {
			return err
		}
		if err := st.Send(&queuev1.SendRequest{}); err != nil {
			// The server ended the stream already: CloseAndRecv says how.
			_, err = st.CloseAndRecv()
			return err
		}
		_, err = st.CloseAndRecv()
		return err
	case method == queuev1.RaftService_SendSnapshot_FullMethodName:
		st, err := queuev1.NewRaftServiceClient(conn).SendSnapshot(ctx)
		if err != nil {
			return err
		}
		if err := st.Send(&queuev1.SendSnapshotRequest{}); err != nil {
			_, err = st.CloseAndRecv()
			return err
		}
		_, err = st.CloseAndRecv()
		return err
	case method == healthpb.Health_Check_FullMethodName:
		_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	case method == reflectionpb.ServerReflection_ServerReflectionInfo_FullMethodName:
		st, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
		if err != nil {
			return err
		}
		if err := st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			return err
		}
		if _, err := st.Recv(); err != nil {
			return err
		}
		return st.CloseSend()
	case isQueued(method):
		// Every QueueService request names its queue in field 1.
		return conn.Invoke(ctx, method, &queuev1.StatsRequest{Queue: queue}, &emptypb.Empty{})
	default:
		return conn.Invoke(ctx, method, &emptypb.Empty{}, &emptypb.Empty{})
	}
}

// callWork opens a Work stream with first, and returns the stream's
// error, nil once the server has answered.
func callWork(ctx context.Context, conn *grpc.ClientConn, first proto.Message) error {
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, queueWork)
	if err != nil {
		return err
	}
	if err := st.SendMsg(first); err != nil {
		// The server ended the stream already: RecvMsg says how.
		return st.RecvMsg(&emptypb.Empty{})
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	return st.RecvMsg(&emptypb.Empty{})
}

// contractTable is docs/design.md's role table, written out here on its
// own so that the package's table is checked against the contract, not
// against itself.
var contractTable = map[string][]string{
	"/baton.queue.v1.QueueService/Add":                          {"observer", "admin"},
	"/baton.queue.v1.QueueService/Lease":                        {"worker", "admin"},
	"/baton.queue.v1.QueueService/Ack":                          {"worker", "admin"},
	"/baton.queue.v1.QueueService/Extend":                       {"worker", "admin"},
	"/baton.queue.v1.QueueService/Work":                         {"worker", "admin"},
	"/baton.queue.v1.QueueService/Inspect":                      {"viewer", "worker", "observer", "admin"},
	"/baton.queue.v1.QueueService/List":                         {"viewer", "worker", "observer", "admin"},
	"/baton.queue.v1.QueueService/Stats":                        {"viewer", "worker", "observer", "admin"},
	"/baton.queue.v1.QueueService/Forget":                       {"admin"},
	"/baton.observer.v1.ObserverService/Get":                    {"worker", "viewer", "admin"},
	"/baton.observer.v1.ObserverService/List":                   {"worker", "viewer", "admin"},
	"/baton.observer.v1.ObserverService/Status":                 {"worker", "viewer", "admin", "queue-peer"},
	"/baton.queue.v1.ClusterService/MemberList":                 {"viewer", "admin", "queue-peer"},
	"/baton.queue.v1.ClusterService/Status":                     {"viewer", "admin", "queue-peer"},
	"/baton.queue.v1.ClusterService/MemberAdd":                  {"admin"},
	"/baton.queue.v1.ClusterService/MemberRemove":               {"admin"},
	"/baton.queue.v1.ClusterService/MoveLeader":                 {"admin"},
	"/baton.queue.v1.ClusterService/Snapshot":                   {"admin"},
	"/baton.queue.v1.RaftService/Send":                          {"queue-peer"},
	"/baton.queue.v1.RaftService/SendSnapshot":                  {"queue-peer"},
	"/baton.queue.v1.RaftService/Join":                          {"queue-peer"},
	"/baton.queue.v1.RaftService/Publish":                       {"queue-peer"},
	"/grpc.health.v1.Health/Check":                              nil, // any verified client
	"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo": nil,
}

// TestDefaultTableOverGRPC calls every method of the role table as every
// role, as none and as an unknown one, over mTLS: exactly the contract's
// roles get through, and a denied call reaches no handler, is
// PERMISSION_DENIED naming the identity, the method and the queue, is
// logged once and counted.
func TestDefaultTableOverGRPC(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, nil, tlsfiles.RequireClientCert)
	methods := make([]string, 0, len(contractTable))
	for m := range contractTable {
		methods = append(methods, m)
	}
	slices.Sort(methods)
	for _, ti := range testIdentities {
		conn := s.dial(t, p.source(t, ti.name, ti.orgs...))
		id := tlsfiles.Identity{Name: ti.name}
		for _, o := range ti.orgs {
			if r, ok := strings.CutPrefix(o, "baton:"); ok {
				id.Roles = append(id.Roles, r)
			}
		}
		for _, m := range methods {
			roles := contractTable[m]
			want := roles == nil || slices.ContainsFunc(roles, id.HasRole)
			before := s.calls.Load()
			err := call(t.Context(), conn, m, callQueue)
			ran := s.calls.Load() - before
			counted := !isOpenMethod(m) // health and reflection are not counted handlers
			switch {
			case want && err != nil:
				t.Errorf("%s calling %s: %v, want it allowed (roles %v)", ti.name, m, err, roles)
			case want && counted && ran != 1:
				t.Errorf("%s calling %s: %d handlers ran, want 1", ti.name, m, ran)
			case !want && status.Code(err) != codes.PermissionDenied:
				t.Errorf("%s calling %s: %v, want PERMISSION_DENIED (roles %v)", ti.name, m, err, roles)
			case !want && ran != 0:
				t.Errorf("%s calling %s was denied but %d handlers ran: a denied call reaches no handler", ti.name, m, ran)
			case !want:
				msg := status.Convert(err).Message()
				wantParts := []string{fmt.Sprintf("%q", ti.name), m, "it needs one of the roles"}
				if isQueued(m) && m != queueWork { // a stream is denied before its queue is known
					wantParts = append(wantParts, fmt.Sprintf("on queue %q", callQueue))
				}
				for _, part := range wantParts {
					if !strings.Contains(msg, part) {
						t.Errorf("%s calling %s: message %q does not name %s", ti.name, m, msg, part)
					}
				}
				if got := deniedCount(t, s.reg, m, ti.name); got != 1 {
					t.Errorf("%s{method=%s,identity=%s} = %v, want 1", DeniedMetric, m, ti.name, got)
				}
				if got := s.logs.lines(`"level":"WARN"`, `"method":"`+m+`"`, `"identity":"`+ti.name+`"`); len(got) != 1 {
					t.Errorf("%s calling %s: %d WARN lines, want 1: %q", ti.name, m, len(got), got)
				}
			}
		}
	}
}

// TestDefaultTableCoversGenerated checks that every method of the
// generated services is in the role table: a method added to the protos
// without a row would be refused to everyone.
func TestDefaultTableCoversGenerated(t *testing.T) {
	for _, d := range []*grpc.ServiceDesc{&queuev1.QueueService_ServiceDesc, &observerv1.ObserverService_ServiceDesc, &queuev1.ClusterService_ServiceDesc, &queuev1.RaftService_ServiceDesc} {
		var names []string
		for _, m := range d.Methods {
			names = append(names, m.MethodName)
		}
		for _, s := range d.Streams {
			names = append(names, s.StreamName)
		}
		for _, n := range names {
			full := "/" + d.ServiceName + "/" + n
			if _, ok := Default().methods[full]; !ok {
				t.Errorf("%s is not in the default role table", full)
			}
			if _, ok := contractTable[full]; !ok {
				t.Errorf("%s is not in the test's copy of the contract's table", full)
			}
		}
	}
	// And nothing the table names is missing from the contract.
	for full := range Default().methods {
		if _, ok := contractTable[full]; !ok {
			t.Errorf("the default table names %s, which the contract's does not", full)
		}
	}
}

// TestUnauthenticated checks that a call without a client certificate (a
// server that lets one connect, or plaintext) gets UNAUTHENTICATED, runs
// no handler, and is counted with an empty identity.
func TestUnauthenticated(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, nil, tlsfiles.VerifyClientCertIfGiven)
	conn := s.dial(t, p.anonymous(t))
	for _, m := range []string{queuev1.QueueService_Add_FullMethodName, queueWork, healthpb.Health_Check_FullMethodName} {
		err := call(t.Context(), conn, m, callQueue)
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s without a certificate: %v, want UNAUTHENTICATED", m, err)
		}
		if !strings.Contains(status.Convert(err).Message(), m) {
			t.Errorf("%s: message %q does not name the method", m, status.Convert(err).Message())
		}
		if got := deniedCount(t, s.reg, m, ""); got != 1 {
			t.Errorf("%s{method=%s,identity=\"\"} = %v, want 1", DeniedMetric, m, got)
		}
	}
	if n := s.calls.Load(); n != 0 {
		t.Errorf("%d handlers ran for calls without a certificate", n)
	}

	// Plaintext: no TLS at all.
	a, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(a.UnaryServerInterceptor()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	defer func() { srv.Stop(); <-done }()
	plain, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := call(t.Context(), plain, healthpb.Health_Check_FullMethodName, ""); status.Code(err) != codes.Unauthenticated {
		t.Errorf("health over plaintext: %v, want UNAUTHENTICATED", err)
	}
}

// TestQueuePolicyOverGRPC checks a policy that binds the worker role to the
// queue greetings, on unary calls and on Work streams.
func TestQueuePolicyOverGRPC(t *testing.T) {
	policy, err := Parse([]byte(greetingsPolicy))
	if err != nil {
		t.Fatal(err)
	}
	p := newPKI(t)
	s := startServer(t, p, policy, tlsfiles.RequireClientCert)
	worker := s.dial(t, p.source(t, workerName, "baton:worker"))
	admin := s.dial(t, p.source(t, adminName, "baton:admin"))
	cases := []struct {
		conn    *grpc.ClientConn
		who     string
		method  string
		queue   string
		allowed bool
		reason  string // what the message says after the queue
	}{
		{worker, workerName, queuev1.QueueService_Lease_FullMethodName, "greetings", true, ""},
		{worker, workerName, queuev1.QueueService_Ack_FullMethodName, "greetings", true, ""},
		{worker, workerName, queuev1.QueueService_Lease_FullMethodName, "payments", false, ""},
		{worker, workerName, queuev1.QueueService_Extend_FullMethodName, "greetings-2", false, ""},
		{worker, workerName, queuev1.QueueService_Stats_FullMethodName, "payments", true, ""},
		{worker, workerName, queuev1.QueueService_Add_FullMethodName, "greetings", false, ": it needs one of the roles admin"},
		{worker, workerName, queueWork, "greetings", true, ""},
		{worker, workerName, queueWork, "payments", false, ""},
		{admin, adminName, queueWork, "payments", true, ""},
		{admin, adminName, queuev1.QueueService_Forget_FullMethodName, "payments", true, ""},
		{admin, adminName, observerv1.ObserverService_Get_FullMethodName, "", false, ": the policy allows it to no role"},
	}
	for _, tc := range cases {
		before := s.calls.Load()
		err := call(t.Context(), tc.conn, tc.method, tc.queue)
		ran := s.calls.Load() - before
		if tc.allowed {
			if err != nil || ran != 1 {
				t.Errorf("%s calling %s on %s: %v (%d handlers ran), want it allowed", tc.who, tc.method, tc.queue, err, ran)
			}
			continue
		}
		if status.Code(err) != codes.PermissionDenied || ran != 0 {
			t.Errorf("%s calling %s on %s: %v (%d handlers ran), want PERMISSION_DENIED and none", tc.who, tc.method, tc.queue, err, ran)
			continue
		}
		id := fmt.Sprintf("%q (roles %s)", tc.who, strings.TrimSuffix(tc.who, "-1"))
		want := "authz: " + id + " may not call " + tc.method
		if isQueued(tc.method) {
			want += fmt.Sprintf(" on queue %q", tc.queue)
		}
		want += tc.reason
		if got := status.Convert(err).Message(); got != want {
			t.Errorf("%s calling %s on %s:\n got %q\nwant %q", tc.who, tc.method, tc.queue, got, want)
		}
	}
	if got := deniedCount(t, s.reg, queueWork, workerName); got != 1 {
		t.Errorf("%s{method=Work,identity=worker-1} = %v, want 1", DeniedMetric, got)
	}
	if got := s.logs.lines(`"method":"`+queueWork+`"`, `"queue":"payments"`); len(got) != 1 {
		t.Errorf("the denied Work stream logged %d lines, want 1: %q", len(got), got)
	}
}
