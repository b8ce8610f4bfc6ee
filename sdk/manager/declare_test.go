package manager

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/client/schema"
	"github.com/batonrun/baton/sdk/reconcile"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// recordingKV holds what compare-and-put transactions wrote, and when.
type recordingKV struct {
	clientv3.KV // nil: only Txn is called
	mu          sync.Mutex
	values      map[string]string
	at          time.Time // the last write
}

func (r *recordingKV) Txn(context.Context) clientv3.Txn { return &recordingTxn{kv: r} }

type recordingTxn struct {
	kv        *recordingKV
	cmps      []clientv3.Cmp
	then, els []clientv3.Op
}

func (t *recordingTxn) If(c ...clientv3.Cmp) clientv3.Txn  { t.cmps = c; return t }
func (t *recordingTxn) Then(o ...clientv3.Op) clientv3.Txn { t.then = o; return t }
func (t *recordingTxn) Else(o ...clientv3.Op) clientv3.Txn { t.els = o; return t }

// Commit knows the one shape declare sends: value equal, else put.
func (t *recordingTxn) Commit() (*clientv3.TxnResponse, error) {
	t.kv.mu.Lock()
	defer t.kv.mu.Unlock()
	ok := true
	for _, c := range t.cmps {
		v, present := t.kv.values[string(c.KeyBytes())]
		ok = ok && present && v == string(c.ValueBytes())
	}
	ops := t.els
	if ok {
		ops = t.then
	}
	for _, o := range ops {
		t.kv.values[string(o.KeyBytes())] = string(o.ValueBytes())
		t.kv.at = time.Now()
	}
	return &clientv3.TxnResponse{Succeeded: ok}, nil
}

func TestRunPublishesDeclarationsBeforeLeasing(t *testing.T) {
	f, q := startFakeQueue(t)
	kv := &recordingKV{values: map[string]string{}}
	greeting := kinds.Kind{Kind: "Greeting", Resource: "greetings"}
	var leasedAfterPublish sync.Once
	var published time.Time
	rec := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		leasedAfterPublish.Do(func() {
			kv.mu.Lock()
			published = kv.at
			kv.mu.Unlock()
		})
		return reconcile.Result{}, nil
	})
	add(t, q, "default/hi")
	stop := start(t, q, Controller{Name: "greetings", Reconciler: rec, For: greeting, Owns: []kinds.Kind{kinds.MustBuiltin(kinds.Pod)}},
		Options{Etcd: kv})
	eventually(t, "the key reconciled", func() bool { return f.empty() })
	stop()

	kv.mu.Lock()
	defer kv.mu.Unlock()
	got, err := kinds.Parse([]byte(kv.values["/baton/rules/greetings"]))
	if err != nil {
		t.Fatalf("/baton/rules/greetings holds %q: %v", kv.values["/baton/rules/greetings"], err)
	}
	if got.For.Kind != "Greeting" || len(got.Owns) != 1 || got.Owns[0].Kind != kinds.Pod {
		t.Errorf("published %+v", got)
	}
	if published.IsZero() {
		t.Error("a key was reconciled before the declaration was published")
	}
	if len(kv.values) != 1 {
		t.Errorf("published %d keys, want 1: %v", len(kv.values), kv.values)
	}
}

func TestControllersWithoutForDeclareNothing(t *testing.T) {
	f, q := startFakeQueue(t)
	kv := &recordingKV{values: map[string]string{}}
	add(t, q, "default/a")
	stop := start(t, q, Controller{Reconciler: reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		return reconcile.Result{}, nil
	})}, Options{Etcd: kv})
	eventually(t, "the key reconciled", func() bool { return f.empty() })
	stop()
	if len(kv.values) != 0 {
		t.Errorf("a controller without For published %v", kv.values)
	}
}

var foo = kinds.Kind{Kind: "Foo", Resource: "foos"}

func fooSchema() *schema.Kind {
	zero := 0.0
	return &schema.Kind{Spec: &schema.Schema{Type: schema.TypeObject, Properties: map[string]*schema.Schema{
		"replicas": {Type: schema.TypeInteger, Minimum: &zero, Default: 1},
	}}}
}

func fooColumns() []schema.Column {
	return []schema.Column{{Name: "Replicas", Type: "integer", JSONPath: ".spec.replicas"}}
}

// A controller's Schema and PrinterColumns are published in its
// declaration, where batonctl and the SDK's writers find them.
func TestDeclarationCarriesTheSchema(t *testing.T) {
	f, q := startFakeQueue(t)
	kv := &recordingKV{values: map[string]string{}}
	noop := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
	add(t, q, "default/x")
	stop := start(t, q, Controller{Name: "foos", Reconciler: noop, For: foo, Schema: fooSchema(), PrinterColumns: fooColumns()}, Options{Etcd: kv})
	eventually(t, "the key reconciled", func() bool { return f.empty() })
	stop()

	kv.mu.Lock()
	defer kv.mu.Unlock()
	got, err := kinds.Parse([]byte(kv.values["/baton/rules/foos"]))
	if err != nil {
		t.Fatalf("/baton/rules/foos holds %q: %v", kv.values["/baton/rules/foos"], err)
	}
	if got.Schema == nil || got.Schema.Spec == nil || got.Schema.Spec.Properties["replicas"] == nil || len(got.PrinterColumns) != 1 || got.PrinterColumns[0].JSONPath != ".spec.replicas" {
		t.Fatalf("published %s", kv.values["/baton/rules/foos"])
	}
	// The published schema is the one that was given: its default applies.
	v, err := got.Validator()
	if err != nil {
		t.Fatal(err)
	}
	obj := map[string]any{"kind": "Foo", "metadata": map[string]any{"name": "x"}, "spec": map[string]any{}}
	if err := v.Admit(obj); err != nil || obj["spec"].(map[string]any)["replicas"] == nil {
		t.Errorf("the published schema: %v, %v", obj, err)
	}
}

func TestAddChecksTheDeclaration(t *testing.T) {
	_, q := startFakeQueue(t)
	noop := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
	for _, tc := range []struct {
		name string
		c    Controller
		want string
	}{
		{"owns without for", Controller{Name: "a", Reconciler: noop, Owns: []kinds.Kind{kinds.MustBuiltin(kinds.Pod)}}, "no For"},
		{"ignores its status without for", Controller{Name: "a", Reconciler: noop, IgnoreOwnStatus: true}, "no For"},
		{"bad kind", Controller{Name: "a", Reconciler: noop, For: kinds.Kind{Kind: "greeting", Resource: "greetings"}}, "not a kind name"},
		{"bad queue", Controller{Name: "A", Reconciler: noop, For: kinds.Kind{Kind: "Greeting", Resource: "greetings"}}, "not a DNS label"},
		{"owns itself", Controller{Name: "a", Reconciler: noop, For: kinds.MustBuiltin(kinds.Pod), Owns: []kinds.Kind{kinds.MustBuiltin(kinds.Pod)}}, "named twice"},
		{"schema without for", Controller{Name: "a", Reconciler: noop, Schema: fooSchema()}, "no For"},
		{"columns without for", Controller{Name: "a", Reconciler: noop, PrinterColumns: fooColumns()}, "no For"},
		{"bad schema", Controller{Name: "a", Reconciler: noop, For: foo, Schema: &schema.Kind{Spec: &schema.Schema{Type: schema.TypeString}}}, "the root must be of type object"},
		{"bad column", Controller{Name: "a", Reconciler: noop, For: foo, PrinterColumns: []schema.Column{{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"}}}, "NAME, NAMESPACE and AGE are printed always"},
	} {
		err := New(q, Options{}).Add(tc.c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Add = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	d, ok := Controller{Name: "greetings", For: kinds.Kind{Kind: "Greeting", Resource: "greetings"}}.Declaration()
	if !ok || d.Key() != "/baton/rules/greetings" {
		t.Errorf("Declaration() = %+v, %v", d, ok)
	}
	if d.IgnoreOwnStatus {
		t.Errorf("Declaration() = %+v: ignores its own status without being told", d)
	}
	d, _ = Controller{Name: "greetings", For: kinds.Kind{Kind: "Greeting", Resource: "greetings"}, IgnoreOwnStatus: true}.Declaration()
	if !d.IgnoreOwnStatus {
		t.Errorf("Declaration() = %+v: IgnoreOwnStatus lost", d)
	}
	if _, ok := (Controller{Name: "x"}).Declaration(); ok {
		t.Error("a controller without For declares something")
	}
}
