# The convoke node image: FROM scratch with the `convoke` binary, the C libraries it links, and
# passwd/group entries for the unprivileged user it runs as. Ports: 25520 (cluster transport) and
# 8558 (management HTTP). Entrypoint: `convoke run`; configure it with CONVOKE_* variables.
#
# With access to a registry, build it the usual way (compiles in the Rust image):
#     docker build -t convoke .
# Without a registry (this project's machines and CI): `docker/build-image` compiles on the host,
# imports a builder base made from local files and builds this same file with
#     --build-arg BUILDER=convoke-builder-local --build-arg PREBUILT=target/docker/rootfs
ARG BUILDER=docker.io/library/rust:1-bookworm

FROM ${BUILDER} AS build
ARG PREBUILT=""
WORKDIR /src
COPY . .
RUN ["/bin/sh", "docker/stage-rootfs.sh", "/rootfs"]

FROM scratch
COPY --from=build /rootfs/ /
USER 10001:10001
EXPOSE 25520 8558
ENTRYPOINT ["/usr/local/bin/convoke", "run"]
