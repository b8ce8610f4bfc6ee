package server

import (
	"testing"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
)

// The server converts states and priorities between the API and the
// workqueue by a cast (toItem, List, Add), which is right only while the
// workqueue numbers them as baton.queue.v1 does. This test is what holds
// the two numberings together; the log's own numbers (package record) are a
// disk format and are mapped by name in the workqueue.
func TestEnumsAgreeWithTheAPI(t *testing.T) {
	states := map[workqueue.State]queuev1.ItemState{
		workqueue.Absent:  queuev1.ItemState_ITEM_STATE_ABSENT,
		workqueue.Pending: queuev1.ItemState_ITEM_STATE_PENDING,
		workqueue.Delayed: queuev1.ItemState_ITEM_STATE_DELAYED,
		workqueue.Leased:  queuev1.ItemState_ITEM_STATE_LEASED,
		workqueue.Parked:  queuev1.ItemState_ITEM_STATE_PARKED,
	}
	if n := len(queuev1.ItemState_name) - 1; n != len(states) {
		t.Errorf("the API has %d item states, the workqueue %d", n, len(states))
	}
	for w, api := range states {
		if queuev1.ItemState(w) != api {
			t.Errorf("workqueue state %v is %d, the API's %v is %d", w, w, api, api)
		}
	}
	prios := map[workqueue.Priority]queuev1.Priority{
		workqueue.Normal: queuev1.Priority_PRIORITY_NORMAL,
		workqueue.Low:    queuev1.Priority_PRIORITY_LOW,
		workqueue.High:   queuev1.Priority_PRIORITY_HIGH,
	}
	if n := len(queuev1.Priority_name) - 1; n != len(prios) {
		t.Errorf("the API has %d priorities, the workqueue %d", n, len(prios))
	}
	for w, api := range prios {
		if queuev1.Priority(w) != api {
			t.Errorf("workqueue priority %d is the API's %v, want %v", w, queuev1.Priority(w), api)
		}
	}
}
