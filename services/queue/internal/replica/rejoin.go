package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/batonrun/baton/client/tlsfiles"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// join is the transport's Join (the node's side of RaftService.Join). A
// request of another cluster id is refused unless its name and address
// are a member's, or an initial member's that Replace would take back: a
// member MemberAdd added was started with an --initial-cluster that names
// it, so its id is not the queue's, and after ForceNewCluster the queue's
// id is new while the members it left out still ask under the old one.
// The answer tells them the queue's id.
func (n *Node) join(ctx context.Context, req *queuev1.JoinRequest) (*queuev1.JoinResponse, error) {
	if req.GetClusterId() != n.cfg.ClusterID && !n.isMember(req.GetName(), req.GetPeerAddr()) && !n.initialMember(req.GetName(), req.GetPeerAddr()) {
		return nil, status.Errorf(codes.FailedPrecondition,
			"replica: a join of cluster %d reached member %d of cluster %d, where no member is %s at %s (add it with MemberAdd first)",
			req.GetClusterId(), n.cfg.ID, n.cfg.ClusterID, req.GetName(), req.GetPeerAddr())
	}
	// A member asking under another cluster id that this member's
	// --initial-cluster does not name is one MemberAdd added: it may join
	// only as existing says it does (Rejoin). The configuration this
	// member started among would not do: one that joined (a lost disk,
	// after --force-new-cluster) started among those the leader had then.
	addr, initial := n.cfg.Initial[req.GetName()]
	added := n.cfg.Initial != nil && req.GetClusterId() != n.cfg.ClusterID && (!initial || addr != req.GetPeerAddr())
	resp := &queuev1.JoinResponse{Initialized: n.Initialized(), ClusterId: n.cfg.ClusterID, AddedMember: added}
	st := n.Status()
	if st.Leader != 0 {
		n.membersMu.Lock()
		resp.LeaderAddr = n.members[st.Leader].Addr
		n.membersMu.Unlock()
	}
	if n.cfg.Claims != nil && !req.GetClaim() {
		resp.Claimable = n.claimable(req.GetName(), req.GetPeerAddr())
	}
	if req.GetClaim() && n.cfg.Claims != nil {
		id, err := n.claim(req.GetName(), req.GetPeerAddr())
		if err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		if id != 0 {
			resp.Id = id
			for _, m := range n.Members() {
				resp.Members = append(resp.Members, &queuev1.JoinMember{Id: m.ID, Name: m.Name, PeerAddr: m.Addr})
			}
			n.log.Info("handed a member of the restored queue the id its seed gave it", "name", req.GetName(), "id", id)
			return resp, nil
		}
	}
	if !req.GetReplace() || !st.IsLeader {
		return resp, nil
	}
	id, members, err := n.Replace(ctx, req.GetName(), req.GetPeerAddr())
	switch {
	case errors.Is(err, ErrNotMember), errors.Is(err, ErrRemoved):
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	case err != nil:
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	resp.Id = id
	for _, m := range members {
		resp.Members = append(resp.Members, &queuev1.JoinMember{Id: m.ID, Name: m.Name, PeerAddr: m.Addr})
	}
	return resp, nil
}

// Claims are the ids a member restored from a backup holds for the other
// members of its queue (SeedLog), until each takes its own. Claim takes
// name's for good, durably, before it returns (ok false if there is none,
// or none any more): an id handed out once is never handed out again,
// since a member that used it and then lost its disk would come back
// under it having forgotten its votes and its log. A member that asks
// again (it stopped before it wrote the id down) rejoins through the
// leader, as after a lost disk.
type Claims interface {
	Claim(name string) (id uint64, ok bool, err error)
	// Holds reports, taking nothing, whether Claim would hand name an id.
	Holds(name string) bool
}

// claimable reports whether claim would hand name at addr an id.
func (n *Node) claimable(name, addr string) bool {
	for _, m := range n.Members() {
		if m.Name == name && m.Addr == addr && !m.Learner {
			return n.cfg.Claims.Holds(name)
		}
	}
	return false
}

// claim hands name at addr the id the configuration holds for it, if
// Config.Claims still has it and it is the configuration's: 0 otherwise.
// A claim whose id the configuration no longer holds for that name (the
// member rejoined under another id meanwhile) is taken all the same, and
// hands out nothing.
func (n *Node) claim(name, addr string) (uint64, error) {
	var want uint64
	for _, m := range n.Members() {
		if m.Name == name && m.Addr == addr && !m.Learner {
			want = m.ID
		}
	}
	if want == 0 {
		return 0, nil
	}
	id, ok, err := n.cfg.Claims.Claim(name)
	switch {
	case err != nil:
		return 0, fmt.Errorf("replica: hand %s its id: %w", name, err)
	case !ok || id != want:
		return 0, nil
	}
	return id, nil
}

// initialMember reports whether name at addr is one of the members this
// one started with (Config.Peers and Names) and MemberRemove has not
// taken it out.
func (n *Node) initialMember(name, addr string) bool {
	if n.tombstoned(name) {
		return false
	}
	for id, nm := range n.cfg.Names {
		if nm == name && n.cfg.Peers[id] == addr {
			return true
		}
	}
	return false
}

// isMember reports whether name at addr is in the configuration.
func (n *Node) isMember(name, addr string) bool {
	for _, m := range n.Members() {
		if m.Name == name && m.Addr == addr {
			return true
		}
	}
	return false
}

// JoinConfig is what a member with an empty log needs to find out whether
// it is new or lost its disk (Rejoin).
type JoinConfig struct {
	ClusterID uint64
	// Name and Addr are this member's name and peer address.
	Name, Addr string
	// Peers are the other initial members' peer addresses, by name.
	Peers map[string]string
	// TLS dials them with mutual TLS, as the transport does; nil is
	// plaintext.
	TLS *tlsfiles.Source
	// Existing forbids bootstrapping (etcd's --initial-cluster-state
	// existing): the member only ever joins a queue in use, through its
	// leader, even if every other member answers that its log is empty.
	// Without it (new), a member MemberAdd added to a queue in use does
	// not join it (ErrAddedStartedNew).
	Existing bool
	// Retry is the pause between rounds; 0 means 100 ms. Members started
	// together must each see the others empty before the first election
	// ends, or the later ones find the queue in use and rejoin under a
	// new id; the first election waits for them (Config.HoldElection).
	Retry  time.Duration
	Logger *slog.Logger
}

// Decision is Rejoin's: bootstrap the queue as a new member (ID is the
// caller's own), or start with Config.Join under ID among Members.
type Decision struct {
	Bootstrap bool
	ID        uint64
	Members   []Member
	// ClusterID is the queue's: JoinConfig's when it bootstraps, the
	// leader's when it joins (they differ for a member MemberAdd added).
	ClusterID uint64
}

// Rejoin decides how a member whose log is empty starts, asking the other
// members in rounds until it can tell, or ctx ends:
//
//   - If any of them has been in use (its log holds a leader's entry),
//     this member lost its disk: it asks the leader to take it back under
//     a new id (Replace), and starts with Config.Join under it.
//   - If every other member answers, and every one of them is empty, the
//     queue is new: it bootstraps (unless Existing forbids it). Every
//     one, not a majority: members that lost their disks while the one
//     that holds the queue is down (a reboot that wiped two disks of
//     three) would otherwise form a new, empty queue under the same
//     names and ids, and lose everything acknowledged. Only a member that
//     answers counts; a silent one may be the one holding the queue.
//   - Otherwise it waits, saying whom it waits for. A queue that lost
//     more disks than a majority survives is recovered by an operator,
//     never by Rejoin: the survivor restarts as a queue of one
//     (ForceNewCluster), and the others then find it in use.
//
// A leader that refuses to take it back (a member MemberRemove took out
// is refused until MemberAdd adds it again) is asked again every round
// too: Rejoin gives up only when ctx ends, with the last round's answers
// and the leader's last refusal in its error.
//
// A member of the queue in use that answers that MemberAdd added this one
// (JoinResponse.added_member) ends it at once with ErrAddedStartedNew
// unless Existing is set, before anything is asked of the leader: new
// says the member is one of those the queue began with, and one that is
// not would otherwise join as a voter nobody meant it to be. A member
// that lost its disk is one the others started with, and rejoins with
// either flag.
//
// The one case it cannot tell apart is a disk lost before the queue's
// first election ended: its vote in that election is forgotten. Nothing
// had been committed then.
func Rejoin(ctx context.Context, cfg JoinConfig) (Decision, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	retry := cfg.Retry
	if retry <= 0 {
		retry = 100 * time.Millisecond
	}
	a := newAsker(cfg)
	defer a.close()
	ask := func(addr string, replace bool) (*queuev1.JoinResponse, error) {
		return a.ask(ctx, addr, replace, false)
	}
	members := len(cfg.Peers) + 1
	// The errors of the last round ctx did not cut short: a leader's
	// refusal (of a member MemberRemove took out) is what an operator
	// needs to read when Rejoin gives up.
	var lastErrs []error
	// A leader's last refusal to take this member back, kept apart from
	// lastErrs: on a loaded machine the last round can end in timeouts
	// alone, and the refusal is still the answer the operator must act on.
	var refused error
	for round := 0; ; round++ {
		empty := 1 // this member
		var leaders, silent []string
		inUse := false
		var errs []error
		answers := map[string]*queuev1.JoinResponse{}
		for name, addr := range cfg.Peers {
			resp, err := ask(addr, false)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				silent = append(silent, name)
				continue
			}
			answers[name] = resp
		}
		d, ok, err := claimRestored(ctx, cfg, a, answers, round, log)
		switch {
		case errors.Is(err, errTwoQueues):
			// Neither queue: not the one the restored member offers,
			// nor, through its leader, the other.
			answers = nil
			errs = append(errs, err)
		case err != nil:
			errs = append(errs, err)
		case ok:
			return d, nil
		}
		for name, resp := range answers {
			if !resp.GetInitialized() {
				empty++
				continue
			}
			if resp.GetAddedMember() && !cfg.Existing {
				return Decision{}, fmt.Errorf("%w: %s says %s at %s was added to the queue in use (MemberAdd) after the queue began, and this member was started with --initial-cluster-state new, which is for the members the queue begins with: nothing changed; start it again on the same empty --data-dir with --initial-cluster-state existing and it joins",
					ErrAddedStartedNew, name, cfg.Name, cfg.Addr)
			}
			inUse = true
			if a := resp.GetLeaderAddr(); a != "" && a != cfg.Addr {
				leaders = append(leaders, a)
			}
		}
		switch {
		case inUse:
			for _, addr := range leaders {
				resp, err := ask(addr, true)
				if err != nil {
					wrapped := fmt.Errorf("rejoin through %s: %w", addr, err)
					if status.Code(err) == codes.FailedPrecondition {
						refused = wrapped
					}
					errs = append(errs, wrapped)
					continue
				}
				if resp.GetId() == 0 {
					continue // leadership moved
				}
				d := Decision{ID: resp.GetId(), ClusterID: resp.GetClusterId()}
				if d.ClusterID == 0 {
					d.ClusterID = cfg.ClusterID // a leader of a version that did not say
				}
				for _, m := range resp.GetMembers() {
					d.Members = append(d.Members, Member{ID: m.GetId(), Name: m.GetName(), Addr: m.GetPeerAddr()})
				}
				log.Warn("this member's log is empty and the queue has been in use: it lost its disk, and rejoined under a new Raft id", "id", d.ID, "members", len(d.Members))
				return d, nil
			}
		case empty == members && !cfg.Existing:
			log.Info("this member's log is empty, and so is every other member's: the queue is new", "members", members)
			return Decision{Bootstrap: true, ClusterID: cfg.ClusterID}, nil
		}
		if round%50 == 0 {
			level := slog.LevelInfo
			if round > 0 {
				level = slog.LevelWarn // 5 s and counting
			}
			slices.Sort(silent)
			log.Log(ctx, level, waitingFor(inUse, len(leaders) > 0, cfg.Existing, len(silent) > 0), "waiting_for", strings.Join(silent, ","), "empty", empty, "in_use", inUse, "members", members, "errors", errors.Join(errs...))
		}
		if ctx.Err() == nil {
			lastErrs = errs
		}
		select {
		case <-ctx.Done():
			if refused != nil && !slices.Contains(lastErrs, refused) {
				lastErrs = append(lastErrs, fmt.Errorf("the last refusal: %w", refused))
			}
			if len(lastErrs) > 0 {
				return Decision{}, fmt.Errorf("replica: waiting to tell whether the queue is new: %w (last round: %w)", ctx.Err(), errors.Join(lastErrs...))
			}
			return Decision{}, fmt.Errorf("replica: waiting to tell whether the queue is new: %w", ctx.Err())
		case <-time.After(retry):
		}
	}
}

// waitingFor is what Rejoin says it waits for after a round that decided
// nothing: inUse, some member's log holds the queue; leader, one of them
// knows a leader (which did not take this member back this round);
// existing, --initial-cluster-state existing; silent, some member did not
// answer. Each case names what would end the wait: a member started with
// existing waits for the queue in use, never to form one, whatever the
// others answer.
func waitingFor(inUse, leader, existing, silent bool) string {
	switch {
	case inUse && !leader:
		return "a member with an empty log waits for the queue's leader to take it back: the queue is in use and no member knows a leader (if a majority lost their disks, restart the member that holds the queue with --force-new-cluster)"
	case inUse:
		return "a member with an empty log waits for the queue's leader to take it back: the queue is in use, and the leader has not answered or refused (errors has its answer)"
	case existing && silent:
		return "a member with an empty log and --initial-cluster-state existing waits for a member of the queue in use to answer: it joins through the leader and never forms a new queue, and the members that answer are empty"
	case existing:
		return "a member with an empty log and --initial-cluster-state existing waits for a member of the queue in use: every member answers empty, and it never forms a new queue"
	case silent:
		return "a member with an empty log waits for every member to answer before it may form a new queue: one that does not answer may hold the queue"
	}
	return "a member with an empty log waits to tell whether the queue is new or it lost its disk"
}

// errTwoQueues is claimRestored's when a restored member offers this one
// a place while a member of another queue answers too.
var errTwoQueues = errors.New("replica: two queues answer")

// claimRestored takes the Raft id a member restored from a backup holds
// for this one (JoinResponse.claimable), if one does and no member of
// another queue answered this round (a cluster id other than the
// restored member's): a member never chooses between two queues, since
// whichever it joined, the other would be left without the majority it
// counted on (a restore repeated into one member, or made into a member of
// a queue that runs). With two, it takes neither, says so once in a while
// (round), and asks again.
func claimRestored(ctx context.Context, cfg JoinConfig, a *asker, answers map[string]*queuev1.JoinResponse, round int, log *slog.Logger) (Decision, bool, error) {
	var from string
	for name, resp := range answers {
		if resp.GetClaimable() {
			from = name
		}
	}
	if from == "" {
		return Decision{}, false, nil
	}
	restored := answers[from].GetClusterId()
	var others []string
	for name, resp := range answers {
		if name != from && resp.GetInitialized() && resp.GetClusterId() != restored {
			others = append(others, name)
		}
	}
	if len(others) > 0 {
		slices.Sort(others)
		err := fmt.Errorf("%w: %s, restored from a backup, would take this member into its queue (cluster %016x), while %s hold another queue and answer: this member joins neither; stop the one that is not meant and empty its data directory, and this member joins the other", errTwoQueues, from, restored, strings.Join(others, ", "))
		if round%50 == 0 {
			log.Error("a member with an empty log hears two queues", "error", err)
		}
		return Decision{}, false, err
	}
	resp, err := a.ask(ctx, cfg.Peers[from], false, true)
	if err != nil {
		return Decision{}, false, fmt.Errorf("claim the id %s holds for this member: %w", from, err)
	}
	if resp.GetId() == 0 {
		return Decision{}, false, nil // taken meanwhile, or no longer in the configuration
	}
	d := Decision{ID: resp.GetId(), ClusterID: resp.GetClusterId()}
	for _, m := range resp.GetMembers() {
		d.Members = append(d.Members, Member{ID: m.GetId(), Name: m.GetName(), Addr: m.GetPeerAddr()})
	}
	log.Info("this member's log is empty and a member restored from a backup holds the queue: it joins under the id the restore gave it", "from", from, "id", d.ID, "members", len(d.Members))
	return d, true, nil
}

// AwaitStarted asks every other member, in rounds, until each answers
// from its node rather than from the empty responder (its answer names
// the cluster, or says its log is in use), or ctx ends. A member that
// bootstraps a new queue waits for it before its first election counts
// (Config.HoldElection): until then another member may still be asking
// whether the queue is new, and must hear that it is.
func AwaitStarted(ctx context.Context, cfg JoinConfig) error {
	retry := cfg.Retry
	if retry <= 0 {
		retry = 100 * time.Millisecond
	}
	a := newAsker(cfg)
	defer a.close()
	waiting := maps.Clone(cfg.Peers) // the members not heard from their node yet
	for {
		for name, addr := range waiting {
			resp, err := a.ask(ctx, addr, false, false)
			if err == nil && (resp.GetClusterId() != 0 || resp.GetInitialized()) {
				delete(waiting, name)
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			names := slices.Sorted(maps.Keys(waiting))
			return fmt.Errorf("replica: waiting for %s to start: %w", strings.Join(names, ","), ctx.Err())
		case <-time.After(retry):
		}
	}
}

// emptyResponder is RaftService for a member whose log is empty while it
// runs Rejoin, before its node exists: Join says it is not in use, so that
// members that start together can each tell that the queue is new; the
// rest is UNAVAILABLE.
type emptyResponder struct {
	queuev1.UnimplementedRaftServiceServer
	clusterID uint64
}

// NewEmptyResponder returns the RaftService a member serves on its peer
// address while Rejoin runs.
func NewEmptyResponder(clusterID uint64) queuev1.RaftServiceServer {
	return emptyResponder{clusterID: clusterID}
}

func (e emptyResponder) Join(_ context.Context, req *queuev1.JoinRequest) (*queuev1.JoinResponse, error) {
	if req.GetClusterId() != e.clusterID {
		return nil, status.Errorf(codes.FailedPrecondition, "replica: a join of cluster %d reached a member of cluster %d", req.GetClusterId(), e.clusterID)
	}
	return &queuev1.JoinResponse{}, nil
}

func (emptyResponder) Send(queuev1.RaftService_SendServer) error {
	return status.Error(codes.Unavailable, "replica: this member is starting with an empty log")
}

func (emptyResponder) SendSnapshot(queuev1.RaftService_SendSnapshotServer) error {
	return status.Error(codes.Unavailable, "replica: this member is starting with an empty log")
}

// asker asks members the question of Rejoin (RaftService.Join), over one
// connection per address.
type asker struct {
	cfg   JoinConfig
	creds credentials.TransportCredentials
	conns map[string]*grpc.ClientConn
}

func newAsker(cfg JoinConfig) *asker {
	var creds credentials.TransportCredentials = insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = cfg.TLS.ClientCredentials("")
	}
	return &asker{cfg: cfg, creds: creds, conns: map[string]*grpc.ClientConn{}}
}

func (a *asker) close() {
	for _, c := range a.conns {
		c.Close()
	}
}

// ask asks the member at addr whether its log is in use, with replace to
// take this member back under a new id (which only a leader does), and
// with claim for the id a restored member holds for it.
func (a *asker) ask(ctx context.Context, addr string, replace, claim bool) (*queuev1.JoinResponse, error) {
	c, err := a.client(addr)
	if err != nil {
		return nil, err
	}
	// Short for a probe: a member that does not answer within a second
	// counts as not answering this round. A rejoin waits for two
	// configuration changes.
	d := time.Second
	if replace {
		d = 10 * time.Second
	}
	actx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return c.Join(actx, &queuev1.JoinRequest{ClusterId: a.cfg.ClusterID, Name: a.cfg.Name, PeerAddr: a.cfg.Addr, Replace: replace, Claim: claim})
}

// client is the RaftService at addr; its connection is made once.
func (a *asker) client(addr string) (queuev1.RaftServiceClient, error) {
	c := a.conns[addr]
	if c == nil {
		var err error
		if c, err = grpc.NewClient(addr, grpc.WithTransportCredentials(a.creds)); err != nil {
			return nil, err
		}
		a.conns[addr] = c
	}
	return queuev1.NewRaftServiceClient(c), nil
}

// Survey is what the other members answered to one round of Rejoin's
// question, by name.
type Survey struct {
	// InUse answered that their logs hold a leader's entry.
	InUse []string
	// Empty answered that their logs are empty.
	Empty []string
	// Silent did not answer, or refused, with why.
	Silent map[string]error
	// Leaders are, of those InUse, the ones that know a leader: the peer
	// address of the member each takes to lead.
	Leaders map[string]string
}

// SurveyMembers asks every member of cfg.Peers once, together, whether its
// log is in use: for a member that holds a log and must tell whether the
// others hold the queue too (a --force-new-cluster given again).
func SurveyMembers(ctx context.Context, cfg JoinConfig) Survey {
	a := newAsker(cfg)
	defer a.close()
	type answer struct {
		name string
		resp *queuev1.JoinResponse
		err  error
	}
	answers := make(chan answer, len(cfg.Peers))
	for name, addr := range cfg.Peers {
		c, err := a.client(addr)
		go func() {
			if err != nil {
				answers <- answer{name: name, err: err}
				return
			}
			actx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			resp, err := c.Join(actx, &queuev1.JoinRequest{ClusterId: cfg.ClusterID, Name: cfg.Name, PeerAddr: cfg.Addr})
			answers <- answer{name: name, resp: resp, err: err}
		}()
	}
	sv := Survey{Silent: map[string]error{}, Leaders: map[string]string{}}
	for range cfg.Peers {
		an := <-answers
		switch {
		case an.err != nil:
			sv.Silent[an.name] = an.err
		case an.resp.GetInitialized():
			sv.InUse = append(sv.InUse, an.name)
			if l := an.resp.GetLeaderAddr(); l != "" {
				sv.Leaders[an.name] = l
			}
		default:
			sv.Empty = append(sv.Empty, an.name)
		}
	}
	slices.Sort(sv.InUse)
	slices.Sort(sv.Empty)
	return sv
}
