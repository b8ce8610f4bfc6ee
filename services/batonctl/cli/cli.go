// Package cli is batonctl: a command line in the spirit of kubectl and
// etcdctl for Baton's objects in etcd and for its queue and observer.
//
//	batonctl apply -f examples/
//	batonctl get deployments -w
//	batonctl describe deployment/web
//	batonctl scale deploy/web --replicas 5
//	batonctl rollout status deploy/web
//	batonctl queue stats
//	batonctl watch
//	batonctl status
//	batonctl certs init certs/
//	source <(batonctl completion bash)
//
// Main is the whole program behind a function, so tests drive it in-process
// exactly as a user drives the binary. The commands are one table
// (commands.go) that dispatch, --help, "did you mean" and shell completion
// read. Every failure is printed to stderr as one line per problem that
// names the file and line, the field, or the endpoint that could not be
// reached and why, and Main returns non-zero: 1, or 2 for a usage error.
// Text others wrote (names, images, keys, a server's words) is escaped
// wherever it is printed for people (printer.Escape), so a terminal shows
// its control characters instead of obeying them.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	observerclient "github.com/batonrun/baton/client/observer"
	"io"
	"net"
	"net/url"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/client/tlsfiles"
	"github.com/batonrun/baton/sdk/etcdconn"
	"github.com/batonrun/baton/services/batonctl/internal/resource"
	"github.com/batonrun/baton/services/runtime/flagenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// EnvPrefix prefixes the environment variables that mirror the global flags:
// BATON_BATONCTL_ETCD_ENDPOINTS, BATON_BATONCTL_QUEUE_ADDR, …
const EnvPrefix = "BATON_BATONCTL"

// envAliases are the other names of some variables: the certificate flags
// are also BATONCTL_CACERT, BATONCTL_CERT and BATONCTL_KEY (as etcdctl's
// are ETCDCTL_CACERT …), used when the BATON_BATONCTL_ one is not set.
var envAliases = map[string]string{
	EnvPrefix + "_CACERT": "BATONCTL_CACERT",
	EnvPrefix + "_CERT":   "BATONCTL_CERT",
	EnvPrefix + "_KEY":    "BATONCTL_KEY",
}

// Defaults of the global flags (docs/design.md, "Binaries and flags").
const (
	DefaultEtcdEndpoints = "http://127.0.0.1:2379"
	DefaultQueueAddr     = "127.0.0.1:7070"
	DefaultObserverAddr  = "127.0.0.1:7071"
	DefaultTimeout       = 5 * time.Second
)

// IO is what a run of batonctl reads and writes.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Lookup reads the environment; nil means os.LookupEnv.
	Lookup func(string) (string, bool)
}

// Main runs batonctl with args (without the program name) and returns the
// exit status: 0 on success, 1 on failure, 2 on a usage error.
func Main(ctx context.Context, args []string, stdio IO) int {
	if stdio.Stdin == nil {
		stdio.Stdin = strings.NewReader("")
	}
	a := newApp(stdio)
	if len(args) > 0 && args[0] == completeCommand {
		// The words of a line being typed: the global flags among them
		// are read as far as they go, not refused.
		defer a.close()
		return a.fail(cmdComplete(ctx, a, args[1:]))
	}
	// A command's own flag wins over a global flag of the same name that
	// follows the command (rollout status --timeout is how long to wait
	// for the rollout; a --timeout before the command is the global one).
	_, words := hoistGlobals(a.globals, nil, args)
	own, _ := flagsOf(walkPath(a.root, words), newApp(IO{}))
	globals, rest := hoistGlobals(a.globals, own, args)
	if err := flagenv.Parse(a.globals, EnvPrefix, append(globals, rest...), a.lookupWithAliases); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeRootHelp(stdio.Stdout, a)
			return 0
		}
		printError(stdio.Stderr, fmt.Errorf("%w (batonctl help lists the flags)", err))
		return 2
	}
	defer a.close()
	if err := a.checkTLS(); err != nil {
		printError(stdio.Stderr, err)
		return 2
	}
	return a.dispatch(ctx, a.globals.Args())
}

// newApp returns an app whose global flags are defined, not yet parsed,
// with the command tree.
func newApp(stdio IO) *app {
	a := &app{IO: stdio, now: time.Now, root: newTree()}
	fs := flag.NewFlagSet("batonctl", flag.ContinueOnError)
	fs.StringVar(&a.etcdEndpoints, "etcd-endpoints", DefaultEtcdEndpoints, "etcd client URLs, comma-separated")
	fs.StringVar(&a.queueAddr, "queue-addr", DefaultQueueAddr, "the queue's gRPC address (host:port), or its members' comma-separated, tried in turn")
	fs.StringVar(&a.queueHTTPAddr, "queue-http-addr", "", "the queue's HTTP address (/readyz, the dashboard), or its members' comma-separated in --queue-addr's order (default: each member's host with port "+queueHTTPPort+", where the hosts differ)")
	fs.StringVar(&a.observerAddr, "observer-addr", DefaultObserverAddr, "the observer's gRPC address (host:port)")
	fs.DurationVar(&a.timeout, "timeout", DefaultTimeout, "how long to wait for a server before giving up")
	fs.StringVar(&a.tlsFiles.CAFile, "cacert", "", "CA bundle (PEM) that verifies the queue's and the observer's certificates: TLS to them (also BATONCTL_CACERT)")
	fs.StringVar(&a.tlsFiles.CertFile, "cert", "", "your certificate (PEM), presented to the queue and the observer (also BATONCTL_CERT)")
	fs.StringVar(&a.tlsFiles.KeyFile, "key", "", "the key of --cert (PEM) (also BATONCTL_KEY)")
	a.etcdConn.RegisterFlags(fs)
	// The flag package would print its own line and the usage beside
	// batonctl's one error line; -h prints the help instead.
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	a.globals = fs
	return a
}

// lookupWithAliases reads the environment, with the certificate flags'
// other names (envAliases).
func (a *app) lookupWithAliases(k string) (string, bool) {
	if v, ok := a.lookupEnv(k); ok {
		return v, ok
	}
	if alias, ok := envAliases[k]; ok {
		return a.lookupEnv(alias)
	}
	return "", false
}

// walkPath is the command path words name, from their first word that is
// not a flag.
func walkPath(root *command, words []string) path {
	p, _ := walk(root, words)
	return p
}

// hoistGlobals splits args into the global flags, wherever they are (so
// `batonctl get pods --etcd-endpoints URL` works as kubectl and etcdctl
// do), and the rest in order. After the command's first word, a flag that
// own (the command's flags, if known) also defines is the command's.
// Everything after "--" stays where it is.
func hoistGlobals(fs, own *flag.FlagSet, args []string) (globals, rest []string) {
	seenCommand := false
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if !strings.HasPrefix(arg, "-") || name == "" || fs.Lookup(name) == nil || (seenCommand && own != nil && own.Lookup(name) != nil) {
			seenCommand = seenCommand || !strings.HasPrefix(arg, "-")
			rest = append(rest, arg)
			continue
		}
		// Every global flag takes a value.
		globals = append(globals, "--"+name)
		switch {
		case hasValue:
			globals = append(globals, value)
		case i+1 < len(args):
			i++
			globals = append(globals, args[i])
		}
	}
	return globals, rest
}

// usageError is a mistake in the command line (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// app holds the global settings and the lazily made connections.
type app struct {
	IO
	// globals are the global flags; root is the command tree.
	globals *flag.FlagSet
	root    *command

	etcdEndpoints string
	queueAddr     string
	queueHTTPAddr string
	observerAddr  string
	timeout       time.Duration
	now           func() time.Time
	// tlsFiles are --cacert, --cert and --key; tlsSrc is what they load.
	tlsFiles tlsfiles.Config
	tlsSrc   *tlsfiles.Source
	// etcdConn is etcd's TLS and authentication (--etcd-cacert …).
	etcdConn etcdconn.Config

	etcdClient  *clientv3.Client
	queueClient *queueclient.Client
	obsClient   *observerclient.Client
	// memberClients are clients of one member each (memberClient).
	memberClients map[string]*queueclient.Client
	// table is the command's kinds (see kinds).
	table *resource.Table
}

func (a *app) close() {
	if a.etcdClient != nil {
		a.etcdClient.Close()
	}
	if a.queueClient != nil {
		a.queueClient.Close()
	}
	if a.obsClient != nil {
		a.obsClient.Close()
	}
	for _, c := range a.memberClients {
		c.Close()
	}
}

func (a *app) endpoints() []string { return flagenv.SplitList(a.etcdEndpoints) }

// checkTLS refuses a certificate without its key and the reverse (a
// usage error).
func (a *app) checkTLS() error {
	switch c := a.tlsFiles; {
	case c.CertFile != "" && c.KeyFile == "":
		return usagef("--cert is set without --key")
	case c.CertFile == "" && c.KeyFile != "":
		return usagef("--key is set without --cert")
	}
	return nil
}

// tls returns the Source of --cacert, --cert and --key, loaded once; nil
// without them (plaintext to the services).
func (a *app) tls() (*tlsfiles.Source, error) {
	if a.tlsSrc != nil || (a.tlsFiles.CAFile == "" && a.tlsFiles.CertFile == "") {
		return a.tlsSrc, nil
	}
	src, err := tlsfiles.Load(a.tlsFiles)
	if err != nil {
		return nil, err
	}
	a.tlsSrc = src
	return src, nil
}

// etcd returns a client, after checking that etcd answers: a command that
// cannot reach etcd should say so at once and name the endpoint, not fail
// later with a bare deadline.
func (a *app) etcd(ctx context.Context) (*clientv3.Client, error) {
	if a.etcdClient != nil {
		return a.etcdClient, nil
	}
	eps := a.endpoints()
	if len(eps) == 0 {
		return nil, usagef("--etcd-endpoints is empty")
	}
	var hosts []string
	for _, e := range eps {
		if u, err := url.Parse(e); err == nil && u.Host != "" {
			hosts = append(hosts, u.Host)
		} else {
			hosts = append(hosts, e)
		}
	}
	if err := refused("etcd", a.etcdEndpoints, "--etcd-endpoints", hosts...); err != nil {
		return nil, err
	}
	cfg := clientv3.Config{
		Endpoints: eps, DialTimeout: a.timeout, Logger: zap.NewNop(),
		DialKeepAliveTime: 30 * time.Second,
	}
	if err := a.etcdConn.Apply(&cfg, nil); err != nil {
		return nil, err
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		return nil, a.unreachable("etcd", a.etcdEndpoints, "--etcd-endpoints", err)
	}
	// A TLS mismatch or an endpoint that does not answer would cost the
	// whole --timeout (the client retries until then): probes meanwhile
	// say why at once.
	cctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	err = callDiagnosed(cctx, a.etcdProbes(), func(ctx context.Context) error {
		_, err := c.Get(ctx, "health", clientv3.WithCountOnly())
		return err
	})
	if err != nil {
		c.Close()
		return nil, a.unreachable("etcd", a.etcdEndpoints, "--etcd-endpoints", err)
	}
	a.etcdClient = c
	return c, nil
}

// queue returns the queue client; calls through it are bounded by the
// caller's context.
func (a *app) queue() (*queueclient.Client, error) {
	if a.queueClient != nil {
		return a.queueClient, nil
	}
	addrs, err := a.queueAddrs()
	if err != nil {
		return nil, err
	}
	opts, err := a.queueOptions()
	if err != nil {
		return nil, err
	}
	if len(addrs) > 1 {
		// A replicated queue: while its members elect a new leader (a
		// second or two after the leader is lost), the ones up refuse
		// calls UNAVAILABLE, and a command waits that out, within
		// --timeout, as the Go client does. Only when no member listens
		// at all, or they speak TLS where batonctl speaks plaintext (or
		// the reverse), does it fail at once.
		ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
		defer cancel()
		if err, definite := diagnose(ctx, a.grpcProbes("the queue", "--queue-addr", addrs...)); definite {
			return nil, err
		}
		opts = append(opts, queueclient.WithBackoff(queueclient.Backoff{Initial: 50 * time.Millisecond, Max: electionRetryMax}))
	}
	c, err := queueclient.Dial(a.queueAddr, opts...)
	if err != nil {
		return nil, a.unreachable("the queue", a.queueAddr, "--queue-addr", err)
	}
	a.queueClient = c
	return c, nil
}

// electionRetryMax caps the wait between two tries of a call to a
// replicated queue without a leader: an election takes about one
// election timeout (1 s by default), and a command should not sleep much
// past its end.
const electionRetryMax = 250 * time.Millisecond

// queueOptions are the options of every queue client batonctl dials.
// One attempt per member: a command line answers now, it does not wait
// out a restart (the client's default retries Unavailable until the
// deadline), but a list of members is tried in turn, so a member that is
// down (the leader just killed, say) does not hide the others.
func (a *app) queueOptions() ([]queueclient.Option, error) {
	src, err := a.tls()
	if err != nil {
		return nil, err
	}
	opts := []queueclient.Option{queueclient.WithBackoff(queueclient.Backoff{Attempts: 1, PerMember: true})}
	if src != nil {
		opts = append(opts, queueclient.WithTLS(src))
	}
	return opts, nil
}

func (a *app) observer() (*observerclient.Client, error) {
	if a.obsClient == nil {
		src, err := a.tls()
		if err != nil {
			return nil, err
		}
		var opts []observerclient.Option
		if src != nil {
			opts = append(opts, observerclient.WithTLS(src))
		}
		c, err := observerclient.Dial(a.observerAddr, opts...)
		if err != nil {
			return nil, a.unreachable("the observer", a.observerAddr, "--observer-addr", err)
		}
		a.obsClient = c
	}
	return a.obsClient, nil
}

// refused fails at once, naming the server and the flag, when every one of
// addrs refuses a connection: nothing listens there, and waiting out the
// timeout (the etcd client retries until it ends) would only end in
// "context deadline exceeded". An address that does not refuse (or does not
// answer within a second) is left to the real call. gRPC calls need no
// probe: without WaitForReady a refused connection fails the call at once.
func refused(what, flagValue, flagName string, addrs ...string) error {
	for _, addr := range addrs {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil
		}
	}
	return refusedError(what, flagValue, flagName, syscall.ECONNREFUSED)
}

// refusedError says that nothing listens where flagName points.
func refusedError(what, flagValue, flagName string, err error) error {
	return &unreachableError{msg: fmt.Sprintf("connection refused: is %s running at %s? (set %s)", what, flagValue, flagName), err: err}
}

// unreachable words a connection failure so that it names the endpoint and
// the flag that sets it, and, for a Baton service, why it failed, as a
// probe of its address finds (diagnose): nothing listening, no answer, or
// TLS on one side only. Errors that are not about reaching the server pass
// through unchanged.
func (a *app) unreachable(what, addr, flagName string, err error) error {
	if err == nil || !isUnreachable(err) {
		return err
	}
	if what != "etcd" { // etcd's probes ran while the first call waited
		ctx, cancel := context.WithTimeout(context.Background(), 2*probeTimeout+alertWait)
		derr, _ := diagnose(ctx, a.grpcProbes(what, flagName, flagenv.SplitList(addr)...))
		cancel()
		if derr != nil {
			return derr
		}
	}
	// With a list, a refusal may be one member's, or the dead leader's
	// that a member handed a call on to: not "nothing runs there".
	if strings.Contains(err.Error(), "connection refused") && !strings.Contains(addr, ",") {
		return refusedError(what, addr, flagName, err)
	}
	if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded {
		// It accepts connections, in the protocol batonctl speaks, but
		// does not answer in time.
		return &unreachableError{msg: fmt.Sprintf("%s at %s did not answer within %s (--timeout; set %s if it runs elsewhere)", what, addr, a.timeout, flagName), err: err}
	}
	msg := fmt.Sprintf("cannot reach %s at %s (set %s): %s", what, addr, flagName, flatten(err))
	if what != "etcd" && a.tlsFiles.CertFile == "" {
		// Something answers but the call fails: a service serving
		// mutual TLS breaks off a plaintext or certificate-less
		// handshake, which the client sees as a dropped connection.
		msg += " (if it serves mutual TLS, give --cacert, --cert and --key)"
	}
	return &unreachableError{msg: msg, err: err}
}

// unreachableError names the endpoint that could not be reached; its
// message is one line even when the cause joins several errors.
type unreachableError struct {
	msg string
	err error
}

func (e *unreachableError) Error() string { return e.msg }
func (e *unreachableError) Unwrap() error { return e.err }

func flatten(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

func isUnreachable(err error) bool {
	var ue *unreachableError
	if errors.As(err, &ue) {
		return false // already worded
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	s := err.Error()
	return strings.Contains(s, "connection refused") || strings.Contains(s, "deadline exceeded") || strings.Contains(s, "no such host")
}

// opCtx bounds one round of calls.
func (a *app) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, a.timeout)
}

// stringsFlag is a repeatable string flag (-f a -f b).
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

// parse parses a command's flags wherever they appear among its
// arguments (kubectl accepts `get deploy web -o yaml`), and returns the
// positional arguments. "--" ends the flags. -h is flag.ErrHelp, for the
// caller to print the command's help.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	// The flag package would print its own line and the usage beside the
	// one error line batonctl prints.
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, flag.ErrHelp
			}
			return nil, usageError{fmt.Sprintf("%v (batonctl %s -h lists its flags)", err, fs.Name())}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// stdoutIsTerminal reports whether w is a terminal (watch then redraws in
// place instead of appending).
func stdoutIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
