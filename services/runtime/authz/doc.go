// Package authz decides what a Baton server's clients may do: each gRPC
// call and HTTP request is allowed or refused by the roles of the client's
// verified certificate (tlsfiles.Identity: the subject CN is its name, each
// O value "baton:<role>" a role) and a Policy, by default the role table of
// docs/design.md, "Trust", or the file of --authz-policy, which replaces
// it. docs/security.md, "Authorization", is the operator's side.
//
//	policy := authz.Default()
//	if file != "" {
//		if policy, err = authz.Load(file); err != nil {
//			return err // names the file and the line
//		}
//	}
//	a, err := authz.New(authz.Options{Policy: policy, Logger: log, Registerer: reg})
//	srv := grpc.NewServer(grpc.Creds(creds),
//		grpc.ChainUnaryInterceptor(a.UnaryServerInterceptor()),
//		grpc.ChainStreamInterceptor(a.StreamServerInterceptor()))
//	httpSrv := &http.Server{Handler: a.HTTP(mux), TLSConfig: httpTLS}
//
// # The decision
//
// A call is allowed when a rule names one of the identity's roles and the
// method, and either names no queues or one that matches the queue of the
// request. A method no rule names is refused to everyone, and so is a
// method that is not one of the table's (fail closed); grpc.health.v1 and
// server reflection are allowed to every verified client, whatever its
// roles, and are not named in a policy. Roles a certificate has that no
// rule names (an unknown one) allow nothing.
//
// The queue of a unary call is its request's (GetQueue: every QueueService
// request names one; Stats's "" means every queue, which a glob like "*"
// matches and a name does not). The queue of a stream is its first
// message's, or that of the message's open field (QueueService Work opens
// with open {queue, …}).
//
// A refused call gets PERMISSION_DENIED, its message naming the identity,
// the method and, for a QueueService method, the queue:
//
//	authz: "worker-1" (roles worker) may not call /baton.queue.v1.QueueService/Lease on queue "payments"
//	authz: "viewer-1" (roles viewer) may not call /baton.queue.v1.QueueService/Add on queue "jobs": it needs one of the roles observer, admin
//
// A call without a verified client certificate gets UNAUTHENTICATED (a
// gRPC server that requires one refuses such a client at the handshake,
// before any call). Each refusal is logged once, at WARN, and counted in
// baton_authz_denied_total{method, identity} (identity is the CN, "" for a
// client without a certificate). A name from a certificate or a request
// (the CN, a role, a queue, an HTTP path) is logged, counted and quoted as
// tlsfiles.Shown returns it: control and format characters (NUL, U+202E)
// and bytes that are not UTF-8 escaped, and cut to tlsfiles.MaxShownBytes
// with a mark, since a CA may sign a CN of any length and each refusal
// would otherwise carry it whole.
//
// # Interceptors
//
// UnaryServerInterceptor decides before the handler runs: a refused call
// reaches no handler. StreamServerInterceptor decides the method when the
// stream starts; when the identity's roles may call it on some queues
// only, it decides the queue when the handler receives the first message,
// whose RecvMsg then returns PERMISSION_DENIED instead of the message, and
// the stream ends with that error. A handler of such a stream receives its
// first message before it changes anything (as Work must, to know its
// queue) and sends nothing before it. The interceptors are plain gRPC
// interceptors: go-grpc-middleware's auth interceptor hands its function
// the context only, and the queue is in the request.
//
// # HTTP
//
// HTTP serves /healthz and /readyz to anyone, certificate or none (a
// kubelet's probes send none); any other path needs a verified client
// certificate (401 without) whose roles the policy allows that path (403
// otherwise). A path is decided by the most specific path any rule names,
// as http.ServeMux routes: "/metrics" is that path, "/debug/pprof/" all
// under it, "/" everything else (the dashboard and its JSON). The default:
// /metrics and / for viewer and admin, /debug/pprof/ for admin.
//
// # The policy file
//
// A policy file is YAML with the key allow, a list of rules, and optionally
// limits (see Limits below). A rule has
// roles (of observer, worker, viewer, admin, queue-peer) and methods, paths
// or both; methods may be restricted to queues:
//
//	allow:
//	  # workers lease only from the greetings queue
//	  - roles: [worker]
//	    methods:
//	      - /baton.queue.v1.QueueService/Lease
//	      - /baton.queue.v1.QueueService/Ack
//	      - /baton.queue.v1.QueueService/Extend
//	      - /baton.queue.v1.QueueService/Work
//	    queues: [greetings]
//	  # and may look at every queue, and read the observer's cache
//	  - roles: [worker]
//	    methods:
//	      - /baton.queue.v1.QueueService/Inspect
//	      - /baton.queue.v1.QueueService/List
//	      - /baton.queue.v1.QueueService/Stats
//	      - /baton.observer.v1.ObserverService/*
//	  - roles: [admin]
//	    methods:
//	      - /baton.queue.v1.QueueService/*
//	      - /baton.observer.v1.ObserverService/*
//	      - /baton.queue.v1.ClusterService/*
//	    paths: [/]
//
// The keys of a rule:
//
//   - roles: the roles the rule allows, at least one.
//   - methods: full gRPC method names, "/baton.queue.v1.QueueService/Add",
//     or "/<service>/*" for every method of baton.queue.v1.QueueService,
//     baton.observer.v1.ObserverService or baton.queue.v1.ClusterService.
//   - queues: queue names or path.Match globs ("greet*", "team-[ab]-*"); a
//     rule with queues allows its methods on those queues only, and all its
//     methods must be QueueService's. Without queues, every queue.
//   - paths: HTTP paths, literal and clean; one that ends in "/" covers
//     everything under it.
//
// Rules add up: a call is allowed if any rule allows it. The file replaces
// the default table whole, so a policy lists everything to allow, the HTTP
// paths included (Default().Marshal() is the default table as a file to
// start from). Parse and Load refuse, naming the line, a YAML error, an
// unknown key, role, service or method, a key given twice, an empty list,
// a queue that is not a queue name or a malformed glob, queues on a rule
// with a method that names no queue or with paths, a path that is not
// clean, and the health, reflection and probe methods and paths, which are
// always open.
//
// # Limits
//
// With identities in place, the limits of services/runtime/limits can be
// set per role. The optional key limits is a list of limits, each with
// roles and the bound:
//
//	limits:
//	  - roles: [worker]
//	    waiting_leases: 16
//	  - roles: [admin]
//	    waiting_leases: 4096
//
// waiting_leases bounds the Lease calls waiting for work that one identity
// with the role has in flight at once, over all its connections (1 to
// MaxWaitingLeases), in place of the server's per-identity default, lower
// or higher. An identity with several roles that limits name gets the most
// generous; one whose roles no limit names gets the default. The
// per-connection bound is the server's alone. Parse refuses, naming the
// line, an unknown key, role or a role named by two limits, a limit
// without roles or waiting_leases, and a waiting_leases that is not a
// decimal whole number in range. Without limits, a file means what it
// meant before the key existed.
package authz
