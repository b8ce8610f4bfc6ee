# baton/queue: the durable work queue, a static binary built by
# scripts/images.sh. Built FROM scratch so no image registry is needed. The
# build context is the directory scripts/images.sh stages: baton-queue and an
# empty data/.
FROM scratch
COPY baton-queue /usr/local/bin/baton-queue
# scratch has no writable directory: the queue's store is a volume, created
# owned by the non-root user so a fresh named volume inherits that owner.
COPY --chown=65532:65532 data/ /var/lib/baton/queue/
USER 65532:65532
ENV BATON_QUEUE_DATA_DIR=/var/lib/baton/queue
VOLUME /var/lib/baton/queue
# gRPC (baton.queue.v1, grpc.health.v1), then HTTP (/metrics, /healthz, /readyz).
EXPOSE 7070 9090
# The healthcheck subcommand probes the addresses the flags (or BATON_QUEUE_*)
# name; there is no shell to run curl with.
HEALTHCHECK --interval=5s --timeout=4s --start-period=10s --retries=5 \
  CMD ["/usr/local/bin/baton-queue", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/baton-queue"]
