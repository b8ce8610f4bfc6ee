// Package manager runs reconcile.Reconcilers against Baton's queue: the small
// equivalent of controller-runtime's manager and controller, with the
// workqueue replaced by leases from baton.queue.v1.
//
// Each registered Controller gets one leasing loop that long-polls Lease for
// as many keys as it has free workers (one RPC feeds up to Concurrency
// goroutines), one heartbeat loop that extends every lease still held in one
// Extend call every third of the lease duration, and one ack loop that
// coalesces the outcomes finishing within a few milliseconds into one Ack.
//
//	m := manager.New(queueClient, manager.Options{Logger: log})
//	err := m.Add(manager.Controller{Name: "replicasets", Reconciler: r, Concurrency: 4})
//	err = m.Run(ctx) // blocks until ctx is cancelled and in-flight work is done
//
// # Declaring what a controller watches
//
// A Controller that sets For (and Owns, the kinds of the children it
// creates) declares what it watches, as controller-runtime's builder does:
//
//	m := manager.New(queueClient, manager.Options{Logger: log, Etcd: etcdClient})
//	err := m.Add(manager.Controller{Name: "greetings", Reconciler: g,
//		For: greetingKind, Owns: []kinds.Kind{kinds.MustBuiltin(kinds.Pod)}})
//
// Before any controller leases, Run publishes each declaration in etcd at
// /baton/rules/<Name> (package declare: a write only when the stored value
// differs, a bounded retry, and the record stays after the worker stops);
// the observer then announces the controller's keys, and batonctl knows its
// kind. A Controller without For declares nothing: its queue is fed some
// other way, such as an observer rules file.
//
// # Mutual TLS
//
// A Manager dials nothing, so Options has no TLS: it uses the queue
// client it is given, and the reconcilers the observer and etcd clients
// they are given. Dial them with the worker's certificate, which needs the
// worker role to Lease, Ack and Extend and to read through the observer
// (docs/security.md):
//
//	src, err := tlsfiles.Load(tlsfiles.Config{CertFile: crt, KeyFile: key, CAFile: ca})
//	q, err := queueclient.Dial(addr, queueclient.WithTLS(src))
//	o, err := observerclient.Dial(oaddr, observerclient.WithTLS(src))
//
// and etcd's client with the SDK's package etcdconn
// (github.com/batonrun/baton/sdk/etcdconn): its Config registers
// etcdctl's flags (--etcd-cacert, --etcd-cert, --etcd-key, and a user and
// password file), and Apply sets a clientv3.Config's TLS and credentials
// from them:
//
//	var ec etcdconn.Config
//	ec.RegisterFlags(fs) // then, after parsing:
//	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second}
//	err := ec.Apply(&cfg, log)
//	etcd, err := clientv3.New(cfg)
//
// baton-worker and the greeter example take the queue's and observer's
// files from the flags of services/runtime/trust (--tls-cert-file,
// --tls-key-file, --tls-ca-file). The Source, and the one Apply loads for
// etcd, re-read the files when they change.
//
// # Leases and fencing
//
// A key is reconciled only while this worker holds its lease. When an Extend
// answers LEASE_LOST (the lease expired, or an admin forgot the key), the
// reconcile's context is cancelled and its outcome is not acked: another
// worker may already hold the key, and the queue would refuse the stale
// token anyway.
//
// # Shutdown
//
// Cancelling Run's context stops leasing at once. Reconciles in flight get
// GracePeriod to finish and have their outcomes acked; after that their
// contexts are cancelled and their leases are left to lapse, so the queue
// offers the keys to another worker when they expire.
//
// # Outcomes
//
// See package reconcile: success → Ack success; RequeueAfter → Ack
// requeue_after; error or panic → Ack failure (retried with backoff by the
// queue); reconcile.Terminal → Ack terminal (parked with the error as its
// last_error until the key is announced again), logged at error level and
// counted as result="terminal".
//
// # Logs
//
// A failure of a controller's loops that repeats while they retry (Lease,
// Ack or Extend failing, the work stream refused or broken: the queue
// unreachable, or at one of its limits) is logged once per cause, its call
// and gRPC code, per ratelog.DefaultInterval (package ratelog), the next
// line saying how many were held back: a refusal that lasts costs the log
// a line a minute, not one per retry.
//
// # Events
//
// With Options.Events, a Recorder of package events, Run runs it from
// before the first lease until the last reconcile has finished, then lets
// it write what is still buffered: what a reconcile records during the
// grace period is written too. The reconcilers record through it, or a
// view of it with their own component (WithComponent):
//
//	rec, err := events.NewRecorder(etcdClient, events.Options{Component: "greeter", Registerer: reg})
//	m := manager.New(queueClient, manager.Options{Etcd: etcdClient, Events: rec})
//	// and in Reconcile:
//	rec.Event(greeting, events.Normal, "Greeted", "Said hello to %s", name)
//
// # Files
//
//	doc.go      this documentation
//	manager.go  the Manager: Options, Controller and its declaration, New,
//	            Add, Run (declarations published, events run, a runner
//	            started per controller)
//	runner.go   the runner, one per controller: its leased jobs, the
//	            reconcile of each and its outcome, the heartbeat
//	stream.go   the runner on the work stream (the default)
//	unary.go    the runner on unary Lease, Ack and Extend calls
//	pool.go     the goroutines reconciles run on
//	metrics.go  the reconcile metrics
//
// What a controller's keys go through, whichever way they come, is in
// runner.go; stream.go and unary.go only fetch, ack and extend them.
package manager
