package replica

import "strings"

// A configuration change's context says who the change is about, since
// raft's ConfChange carries a Raft id alone. It is text, space-separated
// fields:
//
//	name=peer [client=host:port]   an added member (AddNode, AddLearnerNode)
//	peer                           a member bootstrap added (its name is Names')
//	name [removed]                 a removed member (RemoveNode); "removed"
//	                               when MemberRemove took it out, so the name
//	                               is tombstoned, and absent when a Replace
//	                               takes out the id a member had before it
//	                               lost its disk, which leaves the name the
//	                               queue's
//	name client=host:port          a member's client address (UpdateNode)
//
// Names are letters, digits, '.', '-' and '_', and addresses host:port
// (limits.CheckMemberName, CheckAddr), so neither holds a space or, but
// for "name=peer", an '='. Versions before client addresses and tombstones
// wrote the first field alone; a field this version does not know is
// skipped, so a later one may add more.
type confContext struct {
	name, peer, client string
	// pair: the first field was "name=peer"; else it is in both name and
	// peer, and the change's type says which it is.
	pair    bool
	removed bool
}

const (
	ctxClient  = "client="
	ctxRemoved = "removed"
)

// addContext is an added member's context.
func addContext(name, peer, client string) []byte {
	s := name + "=" + peer
	if client != "" {
		s += " " + ctxClient + client
	}
	return []byte(s)
}

// removeContext is a removal's: tombstone says whether the name leaves
// the queue (MemberRemove) or only the id does (Replace).
func removeContext(name string, tombstone bool) []byte {
	if tombstone {
		return []byte(name + " " + ctxRemoved)
	}
	return []byte(name)
}

// updateContext is a member's new client address.
func updateContext(name, client string) []byte {
	return []byte(name + " " + ctxClient + client)
}

// parseContext reads a context of any version. The first field is the
// name, or for an add "name=peer" or bootstrap's peer address alone; which
// one, only the change's type and the caller know, so a first field
// without '=' is returned as both name and peer.
func parseContext(ctx []byte) confContext {
	fields := strings.Fields(string(ctx))
	if len(fields) == 0 {
		return confContext{}
	}
	var c confContext
	if name, peer, ok := strings.Cut(fields[0], "="); ok {
		c.name, c.peer, c.pair = name, peer, true
	} else {
		c.name, c.peer = fields[0], fields[0]
	}
	for _, f := range fields[1:] {
		switch {
		case strings.HasPrefix(f, ctxClient):
			c.client = strings.TrimPrefix(f, ctxClient)
		case f == ctxRemoved:
			c.removed = true
		}
	}
	return c
}
