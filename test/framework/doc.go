// Package framework runs Baton's real binaries for integration tests, as
// etcd's tests/framework/e2e runs etcd: it builds baton-queue,
// baton-observer, baton-worker or batonctl once per test process, starts
// them as child processes on free loopback ports, waits until they are
// ready, and stops them when the test ends.
//
// # Why binaries
//
// A consumer of a Baton service (the observer, the worker, batonctl) talks
// to it only through client/ and proto/, and its go.mod requires no other
// service's server module (scripts/check-imports.sh enforces it). Its tests
// keep to the same line: they run the other services the way users do, as
// the processes that ship, with their flags, their signal handling and
// their exit codes, instead of linking the servers into the test binary.
// Only what runs the servers itself (services/dev, bench) requires them.
// This module requires client, proto and services/etcdembed (etcd is not a
// Baton service; tests embed it), never a service's module.
//
// # Usage
//
// A test package that starts binaries calls RunTests from its TestMain, so
// the binaries built for it are removed at the end:
//
//	func TestMain(m *testing.M) { os.Exit(framework.RunTests(m)) }
//
//	func TestSomething(t *testing.T) {
//		etcd := framework.StartEtcd(t)
//		q := framework.StartQueue(t, framework.QueueOptions{})
//		o := framework.StartObserver(t, framework.ObserverOptions{
//			EtcdEndpoints: etcd.Endpoints(), QueueAddr: q.Addr,
//			Rules: "rules:\n  - queue: greetings\n    prefix: /registry/greetings/\n",
//		})
//		_, err := etcd.Client.Put(t.Context(), "/registry/greetings/default/hi", "{}")
//		…
//		framework.WaitFor(t, 30*time.Second, "the key in its queue", func() bool {
//			_, err := q.Client.Inspect(t.Context(), "greetings", "default/hi")
//			return err == nil
//		})
//		q.Kill()  // SIGKILL
//		q.Start() // again, on the same ports and data directory
//	}
//
// With TLS (NewCerts: a deployment's certificates for loopback, as
// batonctl certs init writes them) in their options, the services serve
// mutual TLS, dial one another with their own certificates, and Client
// dials as admin; StartEtcdWith starts an etcd that serves TLS, requires
// client certificates and has a user with a password, and ClientFlags are
// the flags that reach it:
//
//	certs := framework.NewCerts(t)
//	etcd := framework.StartEtcdWith(t, framework.EtcdOptions{TLS: certs, User: "baton", Password: "pw"})
//	q := framework.StartQueue(t, framework.QueueOptions{TLS: certs})
//	o := framework.StartObserver(t, framework.ObserverOptions{
//		EtcdEndpoints: etcd.Endpoints(), QueueAddr: q.Addr, TLS: certs, Args: etcd.ClientFlags()})
//
// Every Start* fails the test (t.Fatal) when the binary does not build, does
// not start, or is not ready in time, with the process's output in the
// message; call them from the test's goroutine. Processes are stopped with
// SIGTERM by t.Cleanup, and they also get SIGKILL if the test process dies
// first (Linux), so none outlives its test. Their output is logged when the
// test fails, and a process that exits on its own, exits unclean on
// SIGTERM, or whose race detector reported a race, fails the test.
//
// # Builds
//
// Binaries are built with `go build` in their module's directory under the
// root that go.work marks, with GOWORK=off as scripts/ build every module,
// once per test process and binary. The build goes to a directory under
// os.TempDir() shared by the test processes of one checkout, where go build
// finds a binary up to date and leaves it, so of the packages of one `go
// test ./...` only the first links it; each process runs its own hard link
// of the result, in a temporary directory RunTests removes. Binaries are
// built with -race when the test binary is, so the services' code runs
// under the race detector as it did when tests linked it in.
// BATON_TEST_BIN_DIR, if set, names a directory of prebuilt binaries to run
// instead.
package framework
