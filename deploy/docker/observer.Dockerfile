# baton/observer: the shared informer, a static binary built by
# scripts/images.sh. Built FROM scratch so no image registry is needed. It
# keeps no state on disk, so the root filesystem can be read-only.
FROM scratch
COPY baton-observer /usr/local/bin/baton-observer
USER 65532:65532
# gRPC (baton.observer.v1, grpc.health.v1), then HTTP (/metrics, /healthz, /readyz).
EXPOSE 7071 9091
HEALTHCHECK --interval=5s --timeout=4s --start-period=10s --retries=5 \
  CMD ["/usr/local/bin/baton-observer", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/baton-observer"]
