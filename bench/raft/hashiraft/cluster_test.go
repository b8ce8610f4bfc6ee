package hashiraft

import (
	"testing"

	raftbench "github.com/batonrun/baton/bench/raft"
	"github.com/batonrun/baton/bench/raft/clustertest"
)

func start(opts raftbench.Options) (raftbench.Cluster, error) { return Start(opts) }

func TestCoalesced(t *testing.T) {
	t.Parallel()
	clustertest.Run(t, start, raftbench.Options{Coalesce: true})
}

func TestPerRecord(t *testing.T) {
	t.Parallel()
	clustertest.Run(t, start, raftbench.Options{})
}
