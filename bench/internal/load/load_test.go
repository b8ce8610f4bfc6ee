package load

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestRunItems(t *testing.T) {
	res, err := Run(t.Context(), Spec{Callers: 4, Items: 1000, Latency: true}, func(context.Context, int) (int, error) { return 10, nil })
	if err != nil {
		t.Fatal(err)
	}
	if res.Items < 1000 || res.Items > 1000+4*10 || res.Calls*10 != res.Items || len(res.Latencies) != int(res.Calls) {
		t.Fatalf("%+v", res)
	}
}

func TestRunDuration(t *testing.T) {
	res, err := Run(t.Context(), Spec{Callers: 2, Duration: 50 * time.Millisecond}, func(context.Context, int) (int, error) {
		time.Sleep(time.Millisecond)
		return 1, nil
	})
	if err != nil || res.Elapsed < 50*time.Millisecond || res.Calls == 0 {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestRunError(t *testing.T) {
	boom := errors.New("boom")
	_, err := Run(t.Context(), Spec{Callers: 3, Items: 1 << 40}, func(_ context.Context, c int) (int, error) {
		if c == 1 {
			return 0, boom
		}
		return 1, nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct{ p, want float64 }{{50, 50}, {99, 99}, {100, 100}, {1, 1}} {
		if got := Percentile(d, tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("percentile of nothing")
	}
}
