# vkumd on lavapipe in a container: the same set-up as CI, because it runs ci/setup.sh.
#   docker build -t vkumd .
#   docker run --rm vkumd                     # vkumd info, then the demo checked against numpy
# A real GPU's Vulkan driver can be passed in instead of lavapipe: docs/scale-out.md,
# "Containers".
FROM debian:bookworm

# What ci/setup.sh expects before it starts: Python with venv and pip, certificates for the
# package index, and iproute2 for the Ray tests' namespaces. Everything else (the Vulkan
# loader, lavapipe from bookworm-backports, the validation layers, the virtual environment
# and its extras) is ci/setup.sh's job, so the two stay in step.
RUN apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        python3 python3-venv ca-certificates iproute2 \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/vkumd
COPY . /opt/vkumd
RUN bash ci/setup.sh && rm -rf /var/lib/apt/lists/* /root/.cache/pip

ENV PATH=/opt/vkumd/.venv/bin:$PATH
# The build fails if lavapipe does not load or the demo disagrees with numpy.
RUN vkumd info && python -m vkumd.demo

CMD ["sh", "-c", "vkumd info && python -m vkumd.demo"]
