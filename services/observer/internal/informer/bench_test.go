package informer

import (
	"context"
	"fmt"
	"testing"

	"github.com/batonrun/baton/services/etcdembed"
	"github.com/batonrun/baton/services/observer/internal/cache"
	"github.com/batonrun/baton/services/observer/internal/watchmux"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

type discard struct{}

func (discard) Changed(Change) {}

// BenchmarkRelist100k lists 100,000 pods into an empty cache, handing each
// on (to a consumer that drops them): the informer's part of an observer's
// start.
func BenchmarkRelist100k(b *testing.B) {
	const n = 100000
	srv := etcdembed.StartForTest(b)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), Logger: zap.NewNop(), MaxCallRecvMsgSize: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	mux := watchmux.New(cli, watchmux.Options{})
	defer mux.Close()
	ctx := context.Background()
	for start := 0; start < n; start += 100 {
		ops := make([]clientv3.Op, 0, 100)
		for i := start; i < start+100; i++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/registry/pods/default/web-%06d", i),
				fmt.Sprintf(`{"kind":"Pod","metadata":{"name":"web-%06d","namespace":"default","uid":"u%d","ownerReferences":[{"kind":"ReplicaSet","name":"web","uid":"rs"}]},"status":{"phase":"Running"}}`, i, i)))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		c := cache.New([]string{"/registry/pods/"})
		in := New(mux, "/registry/pods/", c, nil, discard{}, Options{})
		if err := in.relist(ctx, FirstList, 0); err != nil {
			b.Fatal(err)
		}
		if c.Len() != n {
			b.Fatalf("cache holds %d objects, want %d", c.Len(), n)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "objects/s")
}
