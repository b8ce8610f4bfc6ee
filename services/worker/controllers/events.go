package controllers

import (
	"context"
	"errors"
	"strings"

	"github.com/batonrun/baton/sdk/events"
	"github.com/batonrun/baton/sdk/objects"
)

// The controllers record Events (package sdk/events) where Kubernetes'
// record them, with their reasons and messages, so that `batonctl
// describe` tells what was done to an object as kubectl describe does:
//
//   - ReplicaSet: SuccessfulCreate ("Created pod: web-x7k2p") for each pod
//     it creates, SuccessfulDelete for each it deletes, FailedCreate
//     (Warning) when a create fails;
//   - Deployment: ScalingReplicaSet ("Scaled up replica set web-5d9f8 from
//     1 to 3") when it creates or scales one of its ReplicaSets;
//   - Job: SuccessfulCreate for each pod, Completed once it completes,
//     BackoffLimitExceeded (Warning) once it fails, FailedCreate;
//   - StatefulSet: SuccessfulCreate and SuccessfulDelete for each pod
//     ("create Pod web-0 in StatefulSet web successful"), FailedCreate.
//
// An event is recorded once the write it tells of succeeded. Recording
// never blocks or fails a reconcile (the Recorder buffers, and drops what
// it cannot keep), and a reconcile run again after a failed status write
// records nothing twice that it did not do twice. A conflict is no
// failure: it is the optimistic concurrency of every write here, sorted
// out by the next reconcile, so it records no FailedCreate.

// Reasons of the events the controllers record: Kubernetes' own.
const (
	ReasonSuccessfulCreate     = "SuccessfulCreate"
	ReasonSuccessfulDelete     = "SuccessfulDelete"
	ReasonFailedCreate         = "FailedCreate"
	ReasonScalingReplicaSet    = "ScalingReplicaSet"
	ReasonCompleted            = "Completed"
	ReasonBackoffLimitExceeded = "BackoffLimitExceeded"
)

// Component is the name the controller of kind records its events under
// (their source.component): Kubernetes' "replicaset-controller" for a
// ReplicaSet, and so on.
func Component(kind string) string { return strings.ToLower(kind) + "-controller" }

// recordCreated records a SuccessfulCreate for each pod of obj named in
// names.
func recordCreated(rec *events.Recorder, obj events.Object, names []string) {
	for _, n := range names {
		rec.Event(obj, events.Normal, ReasonSuccessfulCreate, "Created pod: %s", n)
	}
}

// recordFailedCreate records that creating obj's pods failed with err,
// unless err is a conflict (see above) or the reconcile's context ended.
func recordFailedCreate(rec *events.Recorder, obj events.Object, err error) {
	if err == nil || errors.Is(err, objects.ErrConflict) || errors.Is(err, errStale) || errors.Is(err, context.Canceled) {
		return
	}
	rec.Event(obj, events.Warning, ReasonFailedCreate, "Error creating: %v", err)
}
