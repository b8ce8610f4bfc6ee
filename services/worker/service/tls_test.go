package service_test

import (
	"testing"

	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/test/framework"
)

// TestMutualTLSEverywhere runs the reference controllers with mutual TLS
// on every link: the queue and the observer serve it and authorize by
// role, the observer and the baton-worker binary dial them with their own
// certificates, and etcd serves TLS, requires client certificates and
// has authentication on (a user with a password file).
func TestMutualTLSEverywhere(t *testing.T) {
	certs := framework.NewCerts(t)
	etcd := framework.StartEtcdWith(t, framework.EtcdOptions{TLS: certs, User: "baton", Password: "correct horse"})
	q := framework.StartQueue(t, framework.QueueOptions{TLS: certs})
	o := framework.StartObserver(t, framework.ObserverOptions{EtcdEndpoints: etcd.Endpoints(), QueueAddr: q.Addr, TLS: certs, Args: etcd.ClientFlags()})
	framework.StartWorker(t, framework.WorkerOptions{
		QueueAddr: q.Addr, ObserverAddr: o.Addr, EtcdEndpoints: etcd.Endpoints(),
		Controllers: "replicasets,pods", TLS: certs, Args: etcd.ClientFlags(),
	})
	s := &stack{t: t, etcd: etcd, cli: etcd.Client, queueAddr: q.Addr, observerAddr: o.Addr, queue: q.Client, observer: o.Client.Raw()}
	s.apply("replicasets", "web", map[string]any{"kind": "ReplicaSet", "spec": map[string]any{"replicas": 2, "template": tpl("nginx", 0, 0)}})
	waitFor(t, converge, "2 running pods and status", func() bool {
		r := get[objects.ReplicaSet](s, "replicasets", "web")
		pods := s.pods("ReplicaSet", "web")
		return len(pods) == 2 && running(pods) == 2 && r.Status.ReadyReplicas == 2
	})
}
