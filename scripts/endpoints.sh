#!/usr/bin/env bash
# Prints where the running compose stack listens on this host and the
# batonctl alias that reaches it as admin: what `make up` and `make up-ha`
# print once the stack is healthy, and again whenever run (published ports
# picked by Docker, BATON_PUBLISH_*="", change when a container restarts).
#
# With docker-compose.ha.yml (COMPOSE_FILE, as make up-ha sets it) the
# queue is three members, queue, queue-2 and queue-3, each publishing its
# gRPC and HTTP ports: the alias names all three (--queue-addr and
# --queue-http-addr, in the same order), so batonctl fails over between
# them when one is down, and every member's dashboard is listed. The client
# addresses the members publish to each other (`batonctl queue members`,
# CLIENT-ADDR: queue:7070, queue-2:7070 …) are the names containers use on
# compose's network, which this host does not resolve: from here, use the
# published ones printed below.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

port() { compose port "$1" "$2" 2>/dev/null | sed 's/^0\.0\.0\.0:/127.0.0.1:/'; }
join() { local IFS=,; echo "$*"; }

# The queue's members in name order: queue, then queue-2, queue-3 when
# docker-compose.ha.yml is in use.
members=()
for svc in $(compose config --services | grep -Ex 'queue(-[0-9]+)?' | sort -V); do
  members+=("$svc")
done
[ ${#members[@]} -gt 0 ] || { echo "endpoints: the compose files in use have no queue service" >&2; exit 1; }
grpc=() http=() up=() down=()
for m in "${members[@]}"; do
  g=$(port "$m" 7070) h=$(port "$m" 9090)
  # A member whose container is not running publishes no port: named
  # apart, and left out of the lists (which must stay in step).
  if [ -z "$g" ] || [ -z "$h" ]; then down+=("$m"); continue; fi
  up+=("$m") grpc+=("$g") http+=("$h")
done
[ ${#up[@]} -gt 0 ] || { echo "endpoints: no member of the queue (${members[*]}) publishes its ports: is the stack running?" >&2; exit 1; }
queue=$(join "${grpc[@]}") qhttp=$(join "${http[@]}")
observer=$(port observer 7071) etcd=$(port etcd 2379) ohttp=$(port observer 9091)

# As admin, to the services and to etcd (whose client-certificate check
# accepts any certificate of the CA). Addresses that are batonctl's
# defaults are left out.
flags=" --cacert $ROOT/certs/ca.crt --cert $ROOT/certs/admin.crt --key $ROOT/certs/admin.key"
flags+=" --etcd-endpoints https://$etcd --etcd-cacert $ROOT/certs/ca.crt --etcd-cert $ROOT/certs/admin.crt --etcd-key $ROOT/certs/admin.key"
[ "$queue" = 127.0.0.1:7070 ] || flags+=" --queue-addr $queue"
[ "$qhttp" = 127.0.0.1:9090 ] || flags+=" --queue-http-addr $qhttp"
[ "$observer" = 127.0.0.1:7071 ] || flags+=" --observer-addr $observer"
status=""
[ "$ohttp" = 127.0.0.1:9091 ] || status+=" --observer-http-addr $ohttp"

echo "Where it listens on this host, mutual TLS everywhere, certificates in $ROOT/certs:"
printf '  %-9s %s\n' etcd "https://$etcd"
for i in "${!up[@]}"; do
  printf '  %-9s %-16s dashboard https://%s/\n' "${up[$i]}" "${grpc[$i]}" "${http[$i]}"
done
for m in "${down[@]}"; do
  printf '  %-9s not running: no published port (%s start %s)\n' "$m" "$(compose_name)" "$m"
done
if [ ${#members[@]} -gt 1 ]; then
  echo "            a replicated queue of ${#members[@]} members: every member's dashboard shows the queues"
  echo "            (a follower's reads them from the leader), as viewer or admin (certs/admin.crt);"
  echo "            batonctl queue members shows their addresses on compose's network (queue:7070 …),"
  echo "            which this host does not resolve: from here, they are the ones above"
else
  echo "            the dashboard as viewer or admin (certs/admin.crt)"
fi
printf '  %-9s %s\n' observer "$observer"
printf '  %-9s %s (scale with: %s up -d --scale worker=3)\n' workers "$(compose ps -q worker | wc -l)" "$(compose_name)"
cat <<MSG

batonctl reaches it (as admin) with these flags:

  alias batonctl='$ROOT/bin/batonctl$flags'

Try:
  batonctl apply -f examples/deployment.yaml
  batonctl get deploy,rs,pods
  batonctl status$status
MSG
if [ ${#members[@]} -gt 1 ]; then
  echo "  batonctl queue members   # the members as the leader sees them: leader, follower or unreachable"
fi
echo "  make down        # stops the stack and removes its volumes (keeps the images)"
