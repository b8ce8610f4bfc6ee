package metricset

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func counter(name string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: name})
}

// TestAllOrNone: a set with one collector the registry refuses registers
// none of them, so the same names register again afterwards.
func TestAllOrNone(t *testing.T) {
	reg := prometheus.NewRegistry()
	taken := counter("taken")
	reg.MustRegister(taken)
	var are prometheus.AlreadyRegisteredError
	if _, err := Register(reg, counter("a"), counter("b"), counter("taken"), counter("c")); !errors.As(err, &are) {
		t.Fatalf("Register = %v, want AlreadyRegisteredError", err)
	}
	if families, _ := reg.Gather(); len(families) != 1 {
		t.Fatalf("after a refused set the registry holds %d families, want only the one it had", len(families))
	}
	if _, err := Register(reg, counter("a"), counter("b"), counter("c")); err != nil {
		t.Fatalf("the same names again: %v", err)
	}
}

// TestUnregister: a closed component's names are free for the next one.
func TestUnregister(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := Register(reg, counter("a"), counter("b"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Register(reg, counter("a")); err == nil {
		t.Fatal("registered a name twice")
	}
	s.Unregister()
	if _, err := Register(reg, counter("a"), counter("b")); err != nil {
		t.Fatalf("after Unregister: %v", err)
	}
}

// TestNilRegisterer: without a registry nothing is registered, and
// Unregister is a no-op.
func TestNilRegisterer(t *testing.T) {
	s, err := Register(nil, counter("a"))
	if err != nil {
		t.Fatal(err)
	}
	s.Unregister()
}
