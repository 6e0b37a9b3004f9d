# The autoscaling target: how many concurrent requests (open TTS sessions) per instance the policy holds, derived
# from the stream capacity the server measures itself (docs/deploy.md, "Autoscaling target").
#
# The server sizes its stream slots at warm-up (container/kokoro_tts/engine/capacity.py): it measures the seconds of
# audio its workers make per second side by side ("throughput") and plays at most floor(HEADROOM x throughput)
# streams at once. The slots of an instance type are the ones the server will compute there:
#   CPU type (onnx backend, one worker per vCPU): max(1, floor(HEADROOM x throughput per vCPU x the type's vCPUs))
#   GPU type (torch backend): streams.batched.slots of `make gpu-check` (bench/results/gpu.json, passed in by
#   make deploy as gpu_stream_slots), else a labelled estimate
# The target sits below the slots by a headroom for the load's fluctuation: target tracking holds the *mean* open
# sessions per instance at the target, and sessions that arrive independently are in progress in a Poisson number
# (M/G/inf: whatever the call lengths) whose standard deviation is sqrt(mean). The target is the largest mean m
# with m + z sqrt(m) <= slots, z = 1.645 (the one-sided 95th percentile of the normal approximation): at most about
# one sampled moment in 20 finds more sessions on an instance than it has slots, so scale-out starts while the
# slots still hold every session, not once they are refused. Closed form: m = ((sqrt(z^2 + 4 slots) - z) / 2)^2.
#   target_concurrent_requests_per_model set: that value (an override)
# Scaling the measurement by vCPUs assumes one vCPU of the instance makes as much audio as one vCPU measured; see
# docs/deploy.md for what that assumption leaves open (hyperthreads, older CPUs).

locals {
  # The measurement: the server's own warm-up measurement of the onnx int8 backend (TTSEngine.warm_up,
  # container/kokoro_tts/engine/synthesis.py; every worker busy, one worker per vCPU), which the server logs at startup
  # (`make serve`) as "stream slots: 7 (the workers make 8.76 s of audio per second side by side)" and GET /metrics
  # exposes as kokoro_tts_stream_throughput. Machine: the project's development VM, 2 vCPUs of an Intel Xeon with AMX and
  # AVX512-VNNI/BF16 (the CPU generation of ml.c7i, ml.m7i and ml.r7i: 4th-generation Xeon Scalable), a Firecracker
  # microVM that shows 2 cores of one thread each. 2026-12-03, with the fused Snake kernel (engine/backends/kernels.py):
  # six server starts that day read 8.4-9.4 s/s; this is their median reading.
  onnx_measured_throughput = 8.76 # seconds of audio per second, both workers busy
  onnx_measured_vcpus      = 2
  onnx_measured_families   = ["c7i", "m7i", "r7i"]

  # container/kokoro_tts/engine/capacity.py HEADROOM: the share of the throughput the stream slots use
  # (tests/scripts/test_autoscaling_target.py checks that the two agree).
  stream_headroom = 0.8

  # The load's fluctuation the target leaves room for (see the top of this file): z of the 95th percentile.
  load_quantile = 1.645

  # GPU types run the torch backend. Its slots come from `make gpu-check` (var.gpu_stream_slots, which make deploy
  # reads from bench/results/gpu.json); without that measurement, an estimate: the slot count this module assumed
  # before any GPU measurement, labelled as such in autoscaling_target_source.
  gpu_slots_estimate = 16

  # vCPUs of every CPU instance type the deployment accepts (scripts/deploy/provider_instance_types.txt less the GPU
  # and Graviton types): DefaultVCpus of EC2's DescribeInstanceTypes for the type without "ml." (moto's copy of that
  # answer, moto/ec2/resources/instance_types.json.gz, is what the test compares them with); ml.dl1.24xlarge, which
  # that copy lacks, from the AWS Compute Blog ("Amazon EC2 DL1 instances Deep Dive": 96 vCPUs). Every type here but
  # ml.t2 runs two vCPUs per core (DefaultThreadsPerCore 2); ml.t2 one, and it is burstable (CPU credits).
  cpu_vcpus = {
    # The CPU generation measured: 4th-generation Xeon Scalable (Sapphire Rapids, AMX).
    "ml.c7i.large"    = 2
    "ml.c7i.xlarge"   = 4
    "ml.c7i.2xlarge"  = 8
    "ml.c7i.4xlarge"  = 16
    "ml.c7i.8xlarge"  = 32
    "ml.c7i.12xlarge" = 48
    "ml.c7i.16xlarge" = 64
    "ml.c7i.24xlarge" = 96
    "ml.c7i.48xlarge" = 192
    "ml.m7i.large"    = 2
    "ml.m7i.xlarge"   = 4
    "ml.m7i.2xlarge"  = 8
    "ml.m7i.4xlarge"  = 16
    "ml.m7i.8xlarge"  = 32
    "ml.m7i.12xlarge" = 48
    "ml.m7i.16xlarge" = 64
    "ml.m7i.24xlarge" = 96
    "ml.m7i.48xlarge" = 192
    "ml.r7i.large"    = 2
    "ml.r7i.xlarge"   = 4
    "ml.r7i.2xlarge"  = 8
    "ml.r7i.4xlarge"  = 16
    "ml.r7i.8xlarge"  = 32
    "ml.r7i.12xlarge" = 48
    "ml.r7i.16xlarge" = 64
    "ml.r7i.24xlarge" = 96
    "ml.r7i.48xlarge" = 192

    # Older Xeon generations (the measurement extrapolated: their throughput per vCPU is likely lower).
    "ml.c6i.large"    = 2
    "ml.c6i.xlarge"   = 4
    "ml.c6i.2xlarge"  = 8
    "ml.c6i.4xlarge"  = 16
    "ml.c6i.8xlarge"  = 32
    "ml.c6i.12xlarge" = 48
    "ml.c6i.16xlarge" = 64
    "ml.c6i.24xlarge" = 96
    "ml.c6i.32xlarge" = 128
    "ml.m6i.large"    = 2
    "ml.m6i.xlarge"   = 4
    "ml.m6i.2xlarge"  = 8
    "ml.m6i.4xlarge"  = 16
    "ml.m6i.8xlarge"  = 32
    "ml.m6i.12xlarge" = 48
    "ml.m6i.16xlarge" = 64
    "ml.m6i.24xlarge" = 96
    "ml.m6i.32xlarge" = 128
    "ml.r6i.large"    = 2
    "ml.r6i.xlarge"   = 4
    "ml.r6i.2xlarge"  = 8
    "ml.r6i.4xlarge"  = 16
    "ml.r6i.8xlarge"  = 32
    "ml.r6i.12xlarge" = 48
    "ml.r6i.16xlarge" = 64
    "ml.r6i.24xlarge" = 96
    "ml.r6i.32xlarge" = 128
    "ml.c5.large"     = 2
    "ml.c5.xlarge"    = 4
    "ml.c5.2xlarge"   = 8
    "ml.c5.4xlarge"   = 16
    "ml.c5.9xlarge"   = 36
    "ml.c5.18xlarge"  = 72
    "ml.c5d.large"    = 2
    "ml.c5d.xlarge"   = 4
    "ml.c5d.2xlarge"  = 8
    "ml.c5d.4xlarge"  = 16
    "ml.c5d.9xlarge"  = 36
    "ml.c5d.18xlarge" = 72
    "ml.m5.large"     = 2
    "ml.m5.xlarge"    = 4
    "ml.m5.2xlarge"   = 8
    "ml.m5.4xlarge"   = 16
    "ml.m5.12xlarge"  = 48
    "ml.m5.24xlarge"  = 96
    "ml.m5d.large"    = 2
    "ml.m5d.xlarge"   = 4
    "ml.m5d.2xlarge"  = 8
    "ml.m5d.4xlarge"  = 16
    "ml.m5d.12xlarge" = 48
    "ml.m5d.24xlarge" = 96
    "ml.r5.large"     = 2
    "ml.r5.xlarge"    = 4
    "ml.r5.2xlarge"   = 8
    "ml.r5.4xlarge"   = 16
    "ml.r5.12xlarge"  = 48
    "ml.r5.24xlarge"  = 96
    "ml.r5d.large"    = 2
    "ml.r5d.xlarge"   = 4
    "ml.r5d.2xlarge"  = 8
    "ml.r5d.4xlarge"  = 16
    "ml.r5d.12xlarge" = 48
    "ml.r5d.24xlarge" = 96
    "ml.c4.large"     = 2
    "ml.c4.xlarge"    = 4
    "ml.c4.2xlarge"   = 8
    "ml.c4.4xlarge"   = 16
    "ml.c4.8xlarge"   = 36
    "ml.m4.xlarge"    = 4
    "ml.m4.2xlarge"   = 8
    "ml.m4.4xlarge"   = 16
    "ml.m4.10xlarge"  = 40
    "ml.m4.16xlarge"  = 64
    "ml.t2.medium"    = 2
    "ml.t2.large"     = 2
    "ml.t2.xlarge"    = 4
    "ml.t2.2xlarge"   = 8

    # Accelerator hosts: the onnx image runs on their CPUs only (ml.inf2's are AMD EPYC).
    "ml.inf1.xlarge"    = 4
    "ml.inf1.2xlarge"   = 8
    "ml.inf1.6xlarge"   = 24
    "ml.inf1.24xlarge"  = 96
    "ml.inf2.xlarge"    = 4
    "ml.inf2.8xlarge"   = 32
    "ml.inf2.24xlarge"  = 96
    "ml.inf2.48xlarge"  = 192
    "ml.trn1.2xlarge"   = 8
    "ml.trn1.32xlarge"  = 128
    "ml.trn1n.32xlarge" = 128
    "ml.trn2.48xlarge"  = 192
    "ml.dl1.24xlarge"   = 96
  }

  instance_family          = try(split(".", var.instance_type)[1], "")
  instance_vcpus           = lookup(local.cpu_vcpus, var.instance_type, null)
  onnx_throughput_per_vcpu = local.onnx_measured_throughput / local.onnx_measured_vcpus

  gpu_slots_measured = local.is_gpu_instance && var.gpu_stream_slots != null
  stream_slots = (
    local.is_gpu_instance ? (local.gpu_slots_measured ? var.gpu_stream_slots.slots : local.gpu_slots_estimate) :
    local.instance_vcpus == null ? null :
    max(1, floor(local.stream_headroom * local.onnx_throughput_per_vcpu * local.instance_vcpus))
  )
  derived_target = local.stream_slots == null ? null : max(1, floor(pow(
    (pow(local.load_quantile * local.load_quantile + 4 * local.stream_slots, 0.5) - local.load_quantile) / 2, 2,
  )))
  headroom_basis = local.stream_slots == null ? null : format(
    "target %d: the largest mean m with m + %g sqrt(m) <= %d stream slots",
    local.derived_target, local.load_quantile, local.stream_slots,
  )
  derived_basis = (
    local.gpu_slots_measured ? format(
      "measured: %s; %s",
      var.gpu_stream_slots.source, local.headroom_basis,
    ) :
    local.is_gpu_instance ? format(
      "estimate: %s is a GPU type (torch backend) and bench/results/gpu.json holds no `make gpu-check` measurement; %d stream slots is a guess (the server's \"stream slots\" log line on that GPU, e.g. in the endpoint's log group, gives the figure); %s",
      var.instance_type, local.gpu_slots_estimate, local.headroom_basis,
    ) :
    local.instance_vcpus == null ? null : format(
      "%s: floor(%g headroom * %g s of audio per second per vCPU * %d vCPUs) = %d stream slots, from the onnx warm-up throughput of %g s/s on %d vCPUs of the ml.c7i CPU generation (2026-12-03); %s%s",
      contains(local.onnx_measured_families, local.instance_family) ? "derived" : "extrapolated",
      local.stream_headroom, local.onnx_throughput_per_vcpu, local.instance_vcpus, local.stream_slots,
      local.onnx_measured_throughput, local.onnx_measured_vcpus, local.headroom_basis,
      contains(local.onnx_measured_families, local.instance_family) ? "" : format("; ml.%s has another CPU: check the endpoint's \"stream slots\" log line", local.instance_family),
    )
  )

  # What the policy tracks (null only without autoscaling on a type with no derivation) and where it came from.
  autoscaling_target = var.target_concurrent_requests_per_model != null ? var.target_concurrent_requests_per_model : local.derived_target
  autoscaling_target_source = (
    var.target_concurrent_requests_per_model != null ? format(
      "override: target_concurrent_requests_per_model = %g (%s)",
      var.target_concurrent_requests_per_model,
      local.derived_target == null ? "no figure is derived for ${var.instance_type}" : "the derived figure would be ${local.derived_target}",
    ) : local.derived_basis
  )
}
