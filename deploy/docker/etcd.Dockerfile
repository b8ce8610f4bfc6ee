# baton/etcd: the etcd server and etcdctl v3.6.16, built statically from the
# official Go modules by scripts/images.sh (pinned in deploy/etcd/go.mod).
# Built FROM scratch so no image registry is needed. The build context is the
# directory scripts/images.sh stages: etcd, etcdctl and an empty data/.
FROM scratch
COPY etcd etcdctl /usr/local/bin/
# The data directory is created owned by the non-root user, so a fresh named
# volume mounted there inherits that owner.
COPY --chown=65532:65532 data/ /var/lib/etcd/
USER 65532:65532
# etcd reads every flag from ETCD_<FLAG>; these make a single member that
# listens on all interfaces. A cluster overrides them (see deploy/kubernetes).
ENV ETCD_NAME=etcd \
    ETCD_DATA_DIR=/var/lib/etcd \
    ETCD_LISTEN_CLIENT_URLS=http://0.0.0.0:2379 \
    ETCD_ADVERTISE_CLIENT_URLS=http://127.0.0.1:2379 \
    ETCD_LISTEN_PEER_URLS=http://0.0.0.0:2380 \
    ETCD_INITIAL_ADVERTISE_PEER_URLS=http://127.0.0.1:2380 \
    ETCD_INITIAL_CLUSTER=etcd=http://127.0.0.1:2380
VOLUME /var/lib/etcd
EXPOSE 2379 2380
HEALTHCHECK --interval=5s --timeout=4s --start-period=20s --retries=5 \
  CMD ["/usr/local/bin/etcdctl", "--endpoints=http://127.0.0.1:2379", "--dial-timeout=2s", "--command-timeout=3s", "endpoint", "health"]
ENTRYPOINT ["/usr/local/bin/etcd"]
