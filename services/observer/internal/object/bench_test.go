package object

import "testing"

// benchPod is a pod of about 500 bytes, as the cache's memory benchmark
// stores.
var benchPod = []byte(`{"kind":"Pod","metadata":{"name":"web-000001","namespace":"default","uid":"uid-000001","labels":{"app":"web","pod-template-hash":"5d8f9c7b6"},"ownerReferences":[{"kind":"ReplicaSet","name":"web-5d8f9c7b6","uid":"rs-uid-0001"}]},"spec":{"image":"nginx:1.27","durationSeconds":0,"exitCode":0},"status":{"phase":"Running","startTime":"2026-11-29T10:00:00Z"}}`)

// BenchmarkDecode decodes one pod's metadata, as the informer does for
// every value it sees.
func BenchmarkDecode(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchPod)))
	for range b.N {
		if _, err := Decode(benchPod); err != nil {
			b.Fatal(err)
		}
	}
}
