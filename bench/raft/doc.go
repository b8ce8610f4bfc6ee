// Package raftbench is the spike that chose the Raft library for the
// replicated queue: go.etcd.io/raft/v3 and github.com/hashicorp/raft, each
// behind the same small Cluster interface, driven by the queue's write
// workload (many callers, small records, every answer waiting for a
// majority's fsync). cmd/raftcompare prints the figures docs/queue.md
// quotes; package clustertest holds the checks both adapters must pass.
//
// A module of its own, like ../ (bench), so the services never depend on
// either library before one is chosen.
package raftbench
