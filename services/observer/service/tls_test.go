package service_test

import (
	"testing"
	"time"

	"github.com/batonrun/baton/test/framework"
)

// TestSecureEtcdAndQueue runs the baton-observer binary against an etcd
// that serves TLS, requires client certificates and has authentication on
// (a user with a password file), announcing to a queue that requires the
// observer's certificate (mutual TLS, the observer role for Add); its own
// cache is served over mutual TLS too.
func TestSecureEtcdAndQueue(t *testing.T) {
	certs := framework.NewCerts(t)
	etcd := framework.StartEtcdWith(t, framework.EtcdOptions{TLS: certs, User: "baton", Password: "correct horse"})
	q := framework.StartQueue(t, framework.QueueOptions{TLS: certs})
	o := framework.StartObserver(t, framework.ObserverOptions{
		EtcdEndpoints: etcd.Endpoints(), QueueAddr: q.Addr, Rules: testRulesYAML, TLS: certs, Args: etcd.ClientFlags(),
	})
	put, err := etcd.Client.Put(t.Context(), "/registry/pods/default/p1", `{"kind":"Pod","metadata":{"name":"p1","namespace":"default"}}`)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the pod's key in its queue", func() (bool, string) {
		it, err := q.Client.Inspect(t.Context(), "pods", "default/p1")
		if err != nil {
			return false, err.Error()
		}
		return it.GetState().String() != "ITEM_STATE_ABSENT", it.GetState().String()
	})
	obj, err := o.Client.Get(t.Context(), "/registry/pods/default/p1", put.Header.Revision)
	if err != nil || obj.ModRevision != put.Header.Revision {
		t.Fatalf("Get through the observer's mutual TLS: %+v, %v", obj, err)
	}
}
