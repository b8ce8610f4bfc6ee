package cli

// newTree returns batonctl's commands: the one table that dispatch, help,
// "did you mean" and completion read. A command added here has all four.

func newTree() *command {
	outputValues := map[string]completer{"o": words("json")}
	getValues := map[string]completer{"o": words("json", "yaml", "name", "wide")}
	return &command{
		name: "batonctl",
		example: `
batonctl apply -f examples/
batonctl get deploy -w
batonctl describe deploy/web
batonctl scale deploy/web --replicas 5 && batonctl rollout status deploy/web
batonctl queue stats
batonctl status
source <(batonctl completion bash)`,
		subs: []*command{
			{
				name:  "apply",
				short: "create or update objects from YAML or JSON manifests",
				usage: []string{"apply -f FILE|DIR|- [-f …] [-R] [-n NAMESPACE]"},
				long: `Every manifest is checked before anything is written. A new object gets a
uid and a creation time; a change of spec bumps metadata.generation; the
stored status is kept. Each write is a compare-and-swap on the object's
revision, retried when a controller wrote in between.`,
				example: `
# every manifest in a folder, and its sub-folders
batonctl apply -f examples/ -R
# from stdin
batonctl get deploy web -o yaml | batonctl apply -f -`,
				setup:  setupApply,
				values: map[string]completer{"f": completeFiles},
			},
			{
				name:  "get",
				short: "list objects, or watch them change (-w)",
				usage: []string{
					"get <resource>[,<resource>…] [NAME…] [-n NAMESPACE | -A] [-o json|yaml|name|wide] [-w [--watch-only] [--output-watch-events]]",
					"get TYPE/NAME… [flags]",
				},
				long: `Reads etcd directly. <resource> is a resource, its kind or a short name
(deploy, rs, sts, job, po), a declared kind, "all" (the reference kinds) or a
comma-separated list. -w prints the list, then a line (or with -o json|yaml
a document) for each change until interrupted.`,
				example: `
batonctl get deploy
batonctl get pods -A -o wide
batonctl get deploy/web rs/web-5d9f8 -o yaml
# the pods, then each change as it happens (Ctrl-C ends it)
batonctl get pods -w
batonctl get deploy web -w -o json --output-watch-events`,
				setup:    setupGet,
				complete: completeObjects(nil),
				values:   getValues,
			},
			{
				name:  "describe",
				short: "an object, its queue item and its children",
				usage: []string{"describe <resource> <NAME>… [-n NAMESPACE]", "describe TYPE/NAME… [-n NAMESPACE]"},
				example: `
batonctl describe deploy web
batonctl describe rs/web-5d9f8`,
				setup:    setupDescribe,
				complete: completeObjects(nil),
			},
			{
				name:  "explain",
				short: "the fields of a kind, or of one of its fields, from its schema",
				usage: []string{"explain <resource>[.FIELD…] [--recursive]"},
				long: `Prints the schema apply and the SDK check objects against: a reference
kind's, or the one a controller's declaration carries (a kind declared
without one takes any spec). Each field shows its type, -required- when it
must be set, its description, default, enum and bounds. A path of fields
goes through lists to their elements.`,
				example: `
batonctl explain deploy
batonctl explain deploy.spec.strategy
batonctl explain jobs.status.conditions.type
batonctl explain pods --recursive`,
				setup:    setupExplain,
				complete: completeExplain,
			},
			{
				name:  "delete",
				short: "delete objects by name or from manifests",
				usage: []string{"delete <resource> <NAME>… [-n NAMESPACE] [--ignore-not-found] [--cascade=background|foreground|orphan]", "delete TYPE/NAME… [flags]", "delete -f FILE|DIR|- [-R]"},
				long: `Deleting an owner removes what it owns, as --cascade says: the garbage
collector deletes every object whose owners are all gone, of every kind.
  background (default)  the object goes at once; what it owns goes after it
  foreground            the object is marked for deletion and waits while what
                        it owns goes first
  orphan                what it owns stays, with its reference to the object
                        taken out
An object that holds finalizers is marked for deletion and goes once they are
taken off. With -f, a manifest that carries metadata.uid deletes only that
object.`,
				example: `
batonctl delete deploy web
batonctl delete deploy web --cascade=orphan
batonctl delete pod/web-5d9f8-abcde pod/web-5d9f8-fghij
batonctl delete -f examples/deployment.yaml`,
				setup:    setupDelete,
				complete: completeObjects(nil),
				values:   map[string]completer{"f": completeFiles, "cascade": words("background", "foreground", "orphan")},
			},
			{
				name:  "scale",
				short: "set the replicas of deployments, replicasets or statefulsets",
				usage: []string{"scale TYPE/NAME… --replicas N [--current-replicas N] [-n NAMESPACE]", "scale <resource> <NAME>… --replicas N [flags]"},
				long: `A compare-and-swap write of spec.replicas that bumps metadata.generation, as
apply does; --current-replicas scales only an object that has that many.`,
				example: `
batonctl scale deploy/web --replicas 5
batonctl scale sts db --replicas 3 --current-replicas 1`,
				setup:    setupScale,
				complete: completeObjects(scalable),
			},
			{
				name:  "rollout",
				short: "follow a deployment's rollout",
				usage: []string{"rollout status TYPE/NAME [--timeout D]"},
				example: `
batonctl rollout status deploy/web`,
				subs: []*command{{
					name:  "status",
					short: "wait until a deployment's rollout finishes",
					usage: []string{"rollout status deploy/NAME [--timeout D] [-w=false] [-n NAMESPACE]", "rollout status deployment NAME [flags]"},
					long: `Prints a line each time the rollout progresses, as kubectl does, until the
deployment's controller has observed its latest generation and every
replica is updated and ready; exits 1 if --timeout passes first.`,
					example: `
batonctl rollout status deploy/web
batonctl apply -f web.yaml && batonctl rollout status deploy/web --timeout 2m`,
					setup:    setupRolloutStatus,
					complete: completeObjects(rollable),
				}},
			},
			{
				name:  "queue",
				short: "inspect and edit the queue",
				usage: []string{"queue <command> [flags]"},
				example: `
batonctl queue stats
batonctl queue list pods --state parked
batonctl queue members`,
				subs: []*command{
					{
						name:     "stats",
						short:    "every queue's counters",
						usage:    []string{"queue stats [QUEUE] [-o json]"},
						example:  "batonctl queue stats\nbatonctl queue stats pods -o json",
						setup:    setupQueueStats,
						complete: completeQueues,
						values:   outputValues,
					},
					{
						name:     "list",
						short:    "the keys a queue holds",
						usage:    []string{"queue list QUEUE [--state pending|delayed|leased|parked] [-o json]"},
						example:  "batonctl queue list pods\nbatonctl queue list jobs --state parked",
						setup:    setupQueueList,
						complete: completeQueues,
						values:   map[string]completer{"o": words("json"), "state": words("pending", "delayed", "leased", "parked")},
					},
					{
						name:     "inspect",
						short:    "one key's state, attempts and last error",
						usage:    []string{"queue inspect QUEUE KEY [-o json]"},
						example:  "batonctl queue inspect deployments default/web",
						setup:    setupQueueInspect,
						complete: completeQueues,
						values:   outputValues,
					},
					{
						name:     "forget",
						short:    "drop keys from a queue",
						usage:    []string{"queue forget QUEUE KEY…"},
						example:  "batonctl queue forget pods default/web-5d9f8-abcde",
						setup:    setupQueueForget,
						complete: completeQueues,
					},
					{
						name:  "members",
						short: "the queue's members as its leader sees them, or add and remove one",
						usage: []string{"queue members [-o json]", "queue members add NAME --peer-addr H:P [--client-addr H:P]", "queue members remove NAME"},
						long: `Asks the leader among --queue-addr's members: only it knows which members
it no longer hears from (STATE unreachable) and their format levels.`,
						example: "batonctl queue members\nbatonctl queue members add queue-4 --peer-addr queue-4:7072",
						setup:   setupQueueMembers,
						values:  outputValues,
						subs: []*command{
							{
								name:    "add",
								short:   "add a member to a replicated queue (a learner until it joins)",
								usage:   []string{"queue members add NAME --peer-addr H:P [--client-addr H:P] [-o json]"},
								example: "batonctl queue members add queue-4 --peer-addr queue-4:7072 --client-addr queue-4:7070",
								setup:   setupQueueMembersAdd,
								values:  outputValues,
							},
							{
								name:    "remove",
								short:   "remove a member from a replicated queue",
								usage:   []string{"queue members remove NAME [-o json]"},
								example: "batonctl queue members remove queue-3",
								setup:   setupQueueMembersRemove,
								values:  outputValues,
							},
						},
					},
					{
						name:    "move-leader",
						short:   "hand leadership to another member (before restarting the leader)",
						usage:   []string{"queue move-leader [--to NAME]"},
						example: "batonctl queue move-leader --to queue-2",
						setup:   setupQueueMoveLeader,
					},
					{
						name:    "snapshot",
						short:   "a backup of every queue",
						usage:   []string{"queue snapshot save FILE"},
						example: "batonctl queue snapshot save queue.bak",
						subs: []*command{{
							name:     "save",
							short:    "save a backup of every queue, from the leader (baton-queue restore reads it)",
							usage:    []string{"queue snapshot save FILE"},
							example:  "batonctl queue snapshot save queue-$(date +%F).bak",
							setup:    setupQueueSnapshotSave,
							complete: completeFiles,
						}},
					},
				},
			},
			{
				name:     "watch",
				short:    "a live table of queue depth, rates and oldest age",
				usage:    []string{"watch [QUEUE] [--interval D] [--once]"},
				example:  "batonctl watch --interval 1s\nbatonctl watch pods --once",
				setup:    setupWatch,
				complete: completeQueues,
			},
			{
				name:  "status",
				short: "each service's health (each member of a replicated queue), the observer's lag",
				usage: []string{"status [--queue-http-addr A[,A…]] [--observer-http-addr A] [--worker-http-addr A]"},
				long: `Exits 1, naming them, when a service is down; each row that is down says
why: nothing listening, no answer, or TLS where plaintext was spoken (and
the reverse), with the flag to set.`,
				example: "batonctl status\nbatonctl status --worker-http-addr ''",
				setup:   setupStatus,
			},
			{
				name:  "version",
				short: "the client's version, and the servers' format levels",
				usage: []string{"version [--client] [-o json|yaml]"},
				long: `The client's version (the module version, commit and Go version of the
build), and for each member of the queue its format level, with the queue's,
and whether the observer answers. The servers report no build version of
their own.`,
				example: "batonctl version\nbatonctl version --client -o json",
				setup:   setupVersion,
				values:  map[string]completer{"o": words("json", "yaml")},
			},
			{
				name:  "completion",
				short: "a shell completion script (bash, zsh or fish)",
				usage: []string{"completion bash|zsh|fish"},
				long: `The script completes commands, subcommands, flags, resources and, for get,
describe, delete, scale and rollout status, the names of objects, by
asking batonctl itself (with the global flags on the line being completed).`,
				example: `
# bash, this shell
source <(batonctl completion bash)
# bash, every shell
batonctl completion bash > ~/.local/share/bash-completion/completions/batonctl
# zsh (compinit must have run)
batonctl completion zsh > "${fpath[1]}/_batonctl"
# fish
batonctl completion fish > ~/.config/fish/completions/batonctl.fish`,
				setup:    setupCompletion,
				complete: completeShells,
			},
			{
				name:  "experiment",
				short: "run an investigation's experiment: burst, repeat, failure, clean (runs baton-experiment)",
				usage: []string{"experiment burst|repeat|failure [flags] [-o json]", "experiment clean"},
				long: `Runs baton-experiment, found beside batonctl or on PATH, with batonctl's
global flags; its own flags: batonctl experiment burst --help.`,
				example:  "batonctl experiment burst\nbatonctl experiment clean",
				raw:      cmdExperiment,
				complete: words("burst", "repeat", "failure", "clean"),
			},
			{
				name:  "certs",
				short: "make a deployment's certificates",
				usage: []string{"certs init DIR [flags]", "certs issue --dir DIR --name NAME [flags]"},
				example: `
batonctl certs init certs/
batonctl certs issue --dir certs --name ops --roles admin,viewer --days 30`,
				subs: []*command{
					{
						name:     "init",
						short:    "a CA and a certificate for each service and kind of user",
						usage:    []string{"certs init DIR [--hosts H,…] [--days N] [--ca-days N] [--force|--keep] [--key-group GID]"},
						example:  "batonctl certs init certs/\nbatonctl certs init certs/ --keep --key-group 1000",
						setup:    setupCertsInit,
						complete: completeDirs,
					},
					{
						name:    "issue",
						short:   "one more certificate from a directory's CA",
						usage:   []string{"certs issue --dir DIR --name NAME [--roles R,…] [--hosts H,…] [--days N] [--force]"},
						example: "batonctl certs issue --dir certs --name ops --roles admin,viewer --days 30",
						setup:   setupCertsIssue,
						values:  map[string]completer{"dir": completeDirs, "roles": words(knownRoles()...)},
					},
				},
			},
			{
				name:     "help",
				short:    "help about any command",
				usage:    []string{"help [COMMAND [SUBCOMMAND…]]"},
				example:  "batonctl help get\nbatonctl help queue members",
				setup:    setupHelp,
				complete: completeCommands,
			},
			{
				name:   completeCommand,
				hidden: true,
				short:  "the completions of a command line (what the completion scripts call)",
				usage:  []string{completeCommand + " [WORD…] CURRENT"},
				raw:    cmdComplete,
			},
		},
	}
}
