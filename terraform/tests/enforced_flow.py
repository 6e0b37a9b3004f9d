"""The deploy and destroy flow as a user holding only docs/deployer-policy/, against moto with IAM enforced.

    enforced_flow.py run        --log F [--without SID ...]  bootstrap, then deploy → bench's calls → destroy
    enforced_flow.py needs      --log F                      which call of a run each statement alone allows
    enforced_flow.py escalation                               the deployer's attempts to escape the role boundary

moto runs in this process (iam_authorizer.py replaces its check with one that reads resources and conditions).
INITIAL_NO_AUTH_ACTION_COUNT lets the first requests through unsigned-for: they do what docs/deploy.md asks of an
administrator once (the three deployer policies as managed policies attached to the deployer, the roles'
boundary policy) and create an administrator that only lifts what moto cannot evaluate (the bucket policy's TLS
condition) and reads what a check needs. Everything else runs as the deployer:

  preflight      scripts/deploy/preflight.py's AWS checks (credentials, the permission simulation)
  shared         terraform apply of terraform/shared
  weights        scripts/weights push to the bucket (SSE-KMS: the upload implies kms:GenerateDataKey)
  images         ecr:GetAuthorizationToken, a pushed manifest per repository, the image-digest lookup
  deployment     terraform apply of terraform/deployment (CreateModel implies iam:PassRole; the stack implies
                 CreateAgentRuntime, the role's PassRole and the runtime identity's service-linked role)
  wait           scripts/deploy/endpoint.py's wait for InService
  scaling        the scalable target and target-tracking policy the deployment's apply registered (with its
                 tags: moto_scaling_tags.py serves the tagging moto lacks), then scripts/deploy/scaling.py's
                 release before an instance-type change
  invoke         InvokeEndpoint (the health check) over the wire; the calls that go to local stand-ins
                 elsewhere (bidirectional stream, response stream, InvokeAgentRuntime, StopRuntimeSession) are
                 evaluated against the same policy
  destroy        terraform destroy of terraform/deployment, then terraform/shared (force_destroy applied first)

A refused call stops the run: exit 1 with "DENIED <step>: <principal> may not <action> on <resource>".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(HERE)]

POLICY_DIR = REPO / "docs" / "deployer-policy"
DEPLOYER_POLICIES = ("images-and-weights", "roles", "deployment")
BOUNDARY = "role-boundary"


# The bootstrap's requests: the deployer (user, a managed policy and its attachment per policy, access key), the
# administrator (user, inline policy, access key) and the boundary policy.
def bootstrap_calls(policies: int) -> int:
    return 2 + 2 * policies + 3 + 1


from iam_authorizer import AccessDenied, Authorizer, Call, Decision, evaluate, load_decisions  # noqa: E402
from support.ecr_images import push_image  # noqa: E402

REGION = "us-east-1"
TERRAFORM_TIMEOUT_S = 300
NAME = "kokoro-tts"
ROOTS = ("shared", "deployment")
SERVICES = (
    "applicationautoscaling",
    "cloudformation",
    "cloudwatch",
    "ecr",
    "iam",
    "kms",
    "logs",
    "s3",
    "sagemaker",
    "sts",
)
# Statements no call of this flow needs in moto, and why (docs/deploy.md, Permissions, lists them too).
NOT_EXERCISED = {
    "EcrKeyGrants": "ECR's grants on the repositories' KMS key: moto's ECR creates no grant",
}


class Denied(Exception):
    pass


def log(message: str) -> None:
    print(message, flush=True)


# --------------------------------------------------------------------------------------------------------------
# moto and the two identities


@contextmanager
def moto_server(authorizer: Authorizer, unauthenticated: int) -> Iterator[str]:
    import logging

    import moto_scaling_tags
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    # moto reads INITIAL_NO_AUTH_ACTION_COUNT when it is imported: cmd_run sets it first. Checked, not assumed.
    from moto import settings

    if settings.INITIAL_NO_AUTH_ACTION_COUNT != unauthenticated:
        raise RuntimeError("moto was imported before INITIAL_NO_AUTH_ACTION_COUNT was set: IAM would not be enforced")
    authorizer.install()
    moto_scaling_tags.install()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def client(url: str, service: str, keys: Mapping[str, str]) -> Any:
    import boto3

    factory: Any = boto3.client
    return factory(
        service,
        endpoint_url=url,
        region_name=REGION,
        aws_access_key_id=keys["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=keys["AWS_SECRET_ACCESS_KEY"],
    )


def load_policies() -> dict[str, dict[str, Any]]:
    return {purpose: json.loads((POLICY_DIR / f"{purpose}.json").read_text()) for purpose in DEPLOYER_POLICIES}


def keys(answer: Mapping[str, Any]) -> dict[str, str]:
    key = answer["AccessKey"]
    return {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}


def bootstrap(url: str, policies: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, str], dict[str, str]]:
    """What docs/deploy.md asks of an administrator once (the deployer with ``policies`` attached as managed
    policies, the roles' boundary policy) and a moto administrator; exactly bootstrap_calls(len(policies))
    requests, unauthenticated."""
    anyone = {"AWS_ACCESS_KEY_ID": "bootstrap", "AWS_SECRET_ACCESS_KEY": "bootstrap"}
    iam = client(url, "iam", anyone)
    iam.create_user(UserName="kokoro-deployer")
    for purpose, document in policies.items():
        arn = iam.create_policy(PolicyName=f"{NAME}-deployer-{purpose}", PolicyDocument=json.dumps(document))
        iam.attach_user_policy(UserName="kokoro-deployer", PolicyArn=arn["Policy"]["Arn"])
    deployer = keys(iam.create_access_key(UserName="kokoro-deployer"))
    everything = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    iam.create_user(UserName="moto-admin")
    iam.put_user_policy(UserName="moto-admin", PolicyName="policy", PolicyDocument=json.dumps(everything))
    admin = keys(iam.create_access_key(UserName="moto-admin"))
    boundary = (POLICY_DIR / f"{BOUNDARY}.json").read_text()
    iam.create_policy(PolicyName=f"{NAME}-{BOUNDARY}", PolicyDocument=boundary)
    return deployer, admin


# --------------------------------------------------------------------------------------------------------------
# Terraform against moto


def plugin_args(env: dict[str, str]) -> list[str]:
    found = subprocess.run([str(REPO / "scripts" / "find_tf_plugin_dir.sh")], capture_output=True, text=True)
    if found.returncode == 0 and found.stdout.strip():
        return [f"-plugin-dir={found.stdout.strip()}"]
    env.setdefault("TF_PLUGIN_CACHE_DIR", str(REPO / "terraform" / ".cache" / "plugins"))
    Path(env["TF_PLUGIN_CACHE_DIR"]).mkdir(parents=True, exist_ok=True)
    return []


def terraform_copy(work: Path, url: str) -> None:
    """Both roots and the modules as users run them, plus an override pointing the provider at moto."""
    shutil.copytree(REPO / "terraform" / "modules", work / "modules")
    endpoints = "\n".join(f'    {s} = "{url}"' for s in SERVICES)
    # A few retries: CI once lost moto's reply to a DeleteRolePolicy on loopback ("use of closed network
    # connection"); a refusal (AccessDenied) is never retried, so the authorizer's verdicts stand.
    override = (
        'provider "aws" {\n  skip_credentials_validation = true\n  skip_requesting_account_id = true\n'
        "  skip_metadata_api_check = true\n"
        f"  s3_use_path_style = true\n  max_retries = 3\n  endpoints {{\n{endpoints}\n  }}\n}}\n"
    )
    for root in ROOTS:
        (work / root).mkdir()
        for source in (REPO / "terraform" / root).glob("*.tf"):
            shutil.copy(source, work / root)
        shutil.copy(REPO / "terraform" / root / ".terraform.lock.hcl", work / root)
        (work / root / "moto_override.tf").write_text(override)
    # moto rejects ml.g5/ml.g6 instance types and cannot resolve Fn::GetAtt on AWS::BedrockAgentCore::Runtime
    # (terraform/README.md, Testing).
    (work / "deployment" / "moto.auto.tfvars").write_text(
        'bedrock_model_id = "us.amazon.nova-2-lite-v1:0"\ninstance_type = "ml.m5.large"\n'
        "enable_runtime_outputs = false\n"
    )


class Terraform:
    def __init__(self, work: Path, keys: Mapping[str, str], authorizer: Authorizer) -> None:
        self.work, self.authorizer = work, authorizer
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
            **keys,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": "/dev/null",
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
            "TF_IN_AUTOMATION": "1",
            "TF_INPUT": "0",
            "CHECKPOINT_DISABLE": "1",
        }
        self.init_args = plugin_args(self.env)

    def __call__(self, root: str, *args: str) -> str:
        """Run terraform; a call the authorizer refuses stops it at once (the provider would retry for minutes)."""
        env = {**self.env, "TF_DATA_DIR": str(self.work / "data" / root)}
        command = ["terraform", f"-chdir={self.work / root}", *args, "-no-color"]
        refused_before = self.refused()
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            # Its own process group: a refusal kills terraform and its provider plugin together.
            process = subprocess.Popen(command, env=env, stdout=out, stderr=err, text=True, start_new_session=True)
            deadline = time.monotonic() + TERRAFORM_TIMEOUT_S
            while process.poll() is None:
                if self.refused() > refused_before or time.monotonic() > deadline:
                    time.sleep(1)  # let the provider print its error first
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
                    break
                time.sleep(0.2)
            out.seek(0)
            err.seek(0)
            text, errors = out.read(), err.read()
        if process.returncode != 0:
            raise RuntimeError(f"terraform {root} {args[0]} failed (exit {process.returncode}):\n{errors[-3000:]}")
        return text

    def refused(self) -> int:
        return sum(1 for d in self.authorizer.decisions if d.allowed_by is None)

    def init(self, root: str) -> None:
        self(root, "init", "-input=false", *self.init_args)

    def outputs(self, root: str) -> dict[str, Any]:
        return {k: v["value"] for k, v in json.loads(self(root, "output", "-json")).items()}


# --------------------------------------------------------------------------------------------------------------
# The steps


def weight_layout(dest: Path) -> Path:
    """A small layout the push accepts (Kokoro's config, voice packs of the right size, zeros)."""
    from kokoro_tts.weights.layout import TORCH, VOICE_BYTES, VOICE_NAMES, Manifest, hash_file

    from scripts.weights.sources import packaged_config

    (dest / "voices").mkdir(parents=True)
    shutil.copy(packaged_config(), dest / "config.json")
    (dest / "kokoro.onnx").write_bytes(b"not really an onnx model")
    (dest / TORCH).write_bytes(b"not really torch weights")
    for voice in VOICE_NAMES:
        (dest / "voices" / f"{voice}.bin").write_bytes(bytes(VOICE_BYTES))
    files = {p.relative_to(dest).as_posix(): hash_file(p) for p in dest.rglob("*") if p.is_file()}
    (dest / "manifest.json").write_bytes(Manifest(source="test", files=files).to_json())
    return dest


@contextmanager
def bucket_policy_lifted(s3_admin: Any, bucket: str) -> Iterator[None]:
    """moto evaluates the bucket policy's aws:SecureTransport condition as false on every object request (it reads
    no conditions), so the administrator takes the policy off for the upload and puts the same document back."""
    policy = s3_admin.get_bucket_policy(Bucket=bucket)["Policy"]
    s3_admin.delete_bucket_policy(Bucket=bucket)
    try:
        yield
    finally:
        s3_admin.put_bucket_policy(Bucket=bucket, Policy=policy)


def run_flow(url: str, deployer: dict[str, str], admin: dict[str, str], authorizer: Authorizer, work: Path) -> None:
    import boto3

    from scripts.deploy.account import AccountInputs, check_role_boundary
    from scripts.deploy.ecr import Repository, image_digest
    from scripts.deploy.endpoint import wait_in_service
    from scripts.deploy.permissions import runtime_name
    from scripts.deploy.preflight import Report, check_credentials
    from scripts.deploy.scaling import release_for_instance_type
    from scripts.deploy.tfvars import DeploymentSettings, deployment_variables
    from scripts.weights.s3sync import push

    as_deployer: Callable[[str], Any] = lambda service: client(url, service, deployer)  # noqa: E731
    step = "preflight"

    def begin(name: str) -> None:
        nonlocal step
        step = name
        log(f"== {name}")

    try:
        begin("preflight")
        os.environ["AWS_ENDPOINT_URL"] = url  # the preflight builds its own session from the environment
        session = boto3.Session(
            aws_access_key_id=deployer["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=deployer["AWS_SECRET_ACCESS_KEY"],
            region_name=REGION,
        )
        report = Report()
        working = check_credentials(REGION, report, session, permissions=True)
        if working is not None:
            # The account check that reads IAM (the others read services moto does not serve): the boundary.
            inputs = AccountInputs(REGION, "ml.g5.xlarge", 1, 2, "us.amazon.nova-2-lite-v1:0", working[1], "")
            check_role_boundary(working[0].client("iam"), inputs, report, report.warnings.append)
        if report.problems:
            raise Denied("; ".join(p.what for p in report.problems))
        for line in report.found + report.warnings:
            log(f"  {line}")

        terraform_copy(work, url)
        tf = Terraform(work, deployer, authorizer)
        begin("shared")
        tf.init("shared")
        tf("shared", "apply", "-auto-approve", "-input=false")
        shared = tf.outputs("shared")

        begin("weights")
        bucket = str(shared["weights_bucket_name"])
        with bucket_policy_lifted(client(url, "s3", admin), bucket):
            result = push(weight_layout(work / "weights"), str(shared["weights_s3_uri"]), as_deployer("s3"), quiet=True)
        log(f"  {result}")

        begin("images")
        ecr = as_deployer("ecr")
        ecr.get_authorization_token()  # what ecr-login hands docker
        images = {}
        for key in ("tts_repository_url", "agent_repository_url"):
            repository = Repository.parse(str(shared[key]))
            push_image(ecr, repository.name, "v1", {"repository": repository.name})
            digest = image_digest(ecr, repository, "v1")
            assert digest, f"{repository.name}:v1 was pushed but has no digest"
            images[key] = repository.image_uri(digest)

        begin("deployment")
        settings = DeploymentSettings(
            bedrock_model_id="us.amazon.nova-2-lite-v1:0",
            instance_type="ml.g5.xlarge",
            min_instances=1,
            max_instances=2,
            session_storage="s3",  # the runtime role's statements on the turns, and the bucket's rule that expires them
        )
        variables = deployment_variables(shared, images["tts_repository_url"], images["agent_repository_url"], settings)
        for forced in ("bedrock_model_id", "instance_type", "enable_runtime_outputs"):
            variables.pop(forced, None)  # moto.auto.tfvars decides these
        (work / "deployment" / "deploy.tfvars.json").write_text(json.dumps(variables))
        tf.init("deployment")
        tf("deployment", "apply", "-auto-approve", "-input=false", "-var-file=deploy.tfvars.json")
        outputs = tf.outputs("deployment")
        endpoint, endpoint_arn = str(outputs["endpoint_name"]), str(outputs["endpoint_arn"])

        begin("session turns")
        session_turns(url, admin, outputs)

        begin("wait")
        ready = wait_in_service(as_deployer("sagemaker"), endpoint, timeout_s=60, poll_s=0.1, log=log)
        log(f"  {ready.endpoint_name} is InService")

        begin("scaling")
        scaling = as_deployer("application-autoscaling")
        resource_id = str(outputs["autoscaling_resource_id"])
        registered = scaling.describe_scalable_targets(ServiceNamespace="sagemaker", ResourceIds=[resource_id])
        policies = scaling.describe_scaling_policies(ServiceNamespace="sagemaker", ResourceId=resource_id)
        if not registered["ScalableTargets"] or not policies["ScalingPolicies"]:
            raise RuntimeError(f"the deployment's apply registered no scalable target or policy for {resource_id}")
        log(f"  {resource_id}: target {outputs['autoscaling_target']} ({outputs['autoscaling_target_source']})")
        release_for_instance_type(as_deployer("sagemaker"), scaling, endpoint, "ml.m5.xlarge", log=log)

        begin("invoke")
        as_deployer("sagemaker-runtime").invoke_endpoint(
            EndpointName=endpoint, Body=b"{}", ContentType="application/json", CustomAttributes="health"
        )
        documents = _deployer_policies(url, admin)
        account = endpoint_arn.split(":")[4]
        runtime = f"arn:aws:bedrock-agentcore:{REGION}:{account}:runtime/{runtime_name(NAME)}-AbCdE12345"
        standin_calls = [
            Call("sagemaker:InvokeEndpointWithBidirectionalStream", endpoint_arn, {}, "smoke (stand-in)"),
            Call("sagemaker:InvokeEndpointWithResponseStream", endpoint_arn, {}, "bench batch (stand-in)"),
            Call("bedrock-agentcore:InvokeAgentRuntime", runtime, {}, "smoke-runtime, bench (stand-in)"),
            Call("bedrock-agentcore:StopRuntimeSession", runtime, {}, "bench (stand-in)"),
        ]
        authorizer.check(deployer_arn(account), documents, standin_calls)

        begin("destroy")
        tf("deployment", "destroy", "-auto-approve", "-input=false", "-var-file=deploy.tfvars.json")
        tf("shared", "apply", "-auto-approve", "-input=false", "-var", "force_destroy=true")
        tf("shared", "destroy", "-auto-approve", "-input=false", "-var", "force_destroy=true")
        left = [r["repositoryName"] for r in client(url, "ecr", admin).describe_repositories()["repositories"]]
        if left:
            raise RuntimeError(f"repositories left after the destroy: {left}")
    except AccessDenied as e:
        raise Denied(f"{step}: {e}") from None
    except Exception:
        refused = next((d for d in authorizer.decisions if d.allowed_by is None), None)
        if refused is not None:
            via = f" (implied by {refused.implied_by})" if refused.implied_by else ""
            raise Denied(f"{step}: {refused.principal} may not {refused.action} on {refused.resource}{via}") from None
        raise


def session_turns(url: str, admin: Mapping[str, str], outputs: Mapping[str, Any]) -> None:
    """The agent's durable turns as the runtime role: Strands' S3 storage under the prefix the deployment gave it
    (from the runtime's environment), on the SSE-KMS weight bucket; two turns, the second restoring the first."""
    import asyncio

    import boto3
    from strands.storage import S3Storage
    from voice_agent.conversations import Conversations, Limits
    from voice_agent.hangup import Hangup
    from voice_agent.scripted_model import ScriptedModel

    role = client(url, "iam", admin).get_role(RoleName=f"{NAME}-agentcore")["Role"]["Arn"]
    granted = client(url, "sts", admin).assume_role(RoleArn=role, RoleSessionName="agentcore-runtime")["Credentials"]
    as_runtime = boto3.Session(
        aws_access_key_id=granted["AccessKeyId"],
        aws_secret_access_key=granted["SecretAccessKey"],
        aws_session_token=granted["SessionToken"],
        region_name=REGION,
    )
    store = str(outputs["agent_session_store"])  # s3://bucket/sessions/<runtime>/
    bucket, _, prefix = store.removeprefix("s3://").rstrip("/").partition("/")
    storage = S3Storage(bucket, prefix=prefix, boto_session=as_runtime)
    conversations = Conversations(Limits(20, 16_000, 10, 900.0, 5.0), storage)
    model = ScriptedModel(reply="Noted.", ttft_s=0.0, tokens_per_s=1000.0, echo_context=True)

    async def turn(prompt: str) -> list[Any]:
        async with conversations.turn("enforced-flow-session", Hangup()) as current:
            agent = await current.agent(model, "You are terse.")
            current.asked()
            async for _ in agent.stream_async(prompt):
                pass
            current.see({"type": "agent_end"})
            return list(agent.messages)

    with bucket_policy_lifted(client(url, "s3", admin), bucket):
        asyncio.run(turn("Where is my order?"))
        second = asyncio.run(turn("When will it come?"))
    if [m["role"] for m in second] != ["user", "assistant", "user", "assistant"]:
        raise RuntimeError(f"the second turn did not see the first: {second}")
    log(f"  two turns kept under s3://{bucket}/{prefix}/ as the runtime role")


def deployer_arn(account: str) -> str:
    return f"arn:aws:iam::{account}:user/kokoro-deployer"


def _deployer_policies(url: str, admin: Mapping[str, str]) -> list[dict[str, Any]]:
    """The documents attached to the deployer, read back from IAM."""
    iam = client(url, "iam", admin)
    documents = []
    for attached in iam.list_attached_user_policies(UserName="kokoro-deployer")["AttachedPolicies"]:
        version = iam.get_policy(PolicyArn=attached["PolicyArn"])["Policy"]["DefaultVersionId"]
        answer = iam.get_policy_version(PolicyArn=attached["PolicyArn"], VersionId=version)
        document = answer["PolicyVersion"]["Document"]
        documents.append(json.loads(document) if isinstance(document, str) else dict(document))
    return documents


# --------------------------------------------------------------------------------------------------------------
# The commands


def without(policies: dict[str, dict[str, Any]], sids: list[str]) -> dict[str, dict[str, Any]]:
    unknown = set(sids) - {s.get("Sid") for p in policies.values() for s in p["Statement"]}
    if unknown:
        raise SystemExit(f"no statement {', '.join(sorted(unknown))} in {POLICY_DIR.relative_to(REPO)}")
    return {k: {**p, "Statement": [s for s in p["Statement"] if s.get("Sid") not in sids]} for k, p in policies.items()}


def cmd_run(args: argparse.Namespace) -> int:
    policies = without(load_policies(), args.without)
    os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = str(bootstrap_calls(len(policies)))  # before anything imports moto
    if args.without:
        log(f"policy without {', '.join(args.without)}")
    log_path = Path(args.log)
    log_path.unlink(missing_ok=True)
    authorizer = Authorizer(log_path)
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="enforced-flow-") as tmp,
        moto_server(authorizer, bootstrap_calls(len(policies))) as url,
    ):
        log("== bootstrap")
        deployer, admin = bootstrap(url, policies)
        try:
            run_flow(url, deployer, admin, authorizer, Path(tmp))
        except Denied as e:
            log(f"DENIED {e}")
            return 1
    calls = [d for d in authorizer.decisions if d.principal.endswith("user/kokoro-deployer")]
    log(f"PASS: {len(calls)} calls as the deployer, every one allowed ({time.monotonic() - started:.0f} s)")
    return 0


def needs(decisions: list[Decision], policies: dict[str, dict[str, Any]]) -> dict[str, list[Decision]]:
    """For each Allow statement, the deployer's calls that nothing else in the policies allows."""
    mine = [d for d in decisions if d.principal.endswith("user/kokoro-deployer") and d.allowed_by]
    result: dict[str, list[Decision]] = {}
    for policy in policies.values():
        for statement in policy["Statement"]:
            if statement["Effect"] != "Allow":
                continue
            rest = list(without(policies, [statement["Sid"]]).values())
            result[statement["Sid"]] = [
                d for d in mine if evaluate(rest, Call(d.action, d.resource, d.context)) is None
            ]
    return result


def cmd_needs(args: argparse.Namespace) -> int:
    failed = False
    for sid, calls in needs(load_decisions(Path(args.log)), load_policies()).items():
        if calls:
            first = calls[0]
            via = f" (implied by {first.implied_by})" if first.implied_by else ""
            log(f"  {sid}: {len(calls)} calls need it, e.g. {first.action} on {first.resource}{via}")
        elif sid in NOT_EXERCISED:
            log(f"  {sid}: not exercised in moto: {NOT_EXERCISED[sid]}")
        else:
            log(f"  {sid}: NO call of the flow needs it")
            failed = True
    return 1 if failed else 0


# The deployer's attempts to get a role out of the boundary: (what, the call, refused?). The one allowed attempt
# shows that the refusals are the conditions', not an authorizer that refuses everything.
OTHER_BOUNDARY = "arn:aws:iam::aws:policy/AdministratorAccess"
TRUST = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
)
EVERYTHING = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})


def escalation_attempts(iam: Any, boundary: str) -> list[tuple[str, Callable[[], Any], bool]]:
    role = f"{NAME}-escalation"
    return [
        (
            "create a role without a boundary",
            lambda: iam.create_role(RoleName=role, AssumeRolePolicyDocument=TRUST),
            True,
        ),
        (
            "create a role with another boundary",
            lambda: iam.create_role(RoleName=role, AssumeRolePolicyDocument=TRUST, PermissionsBoundary=OTHER_BOUNDARY),
            True,
        ),
        (
            "create a role with the project's boundary",
            lambda: iam.create_role(RoleName=role, AssumeRolePolicyDocument=TRUST, PermissionsBoundary=boundary),
            False,
        ),
        (
            "give it * on * (the boundary still caps it)",
            lambda: iam.put_role_policy(RoleName=role, PolicyName="all", PolicyDocument=EVERYTHING),
            False,
        ),
        ("remove the role's boundary", lambda: iam.delete_role_permissions_boundary(RoleName=role), True),
        (
            "replace the role's boundary",
            lambda: iam.put_role_permissions_boundary(RoleName=role, PermissionsBoundary=OTHER_BOUNDARY),
            True,
        ),
        (
            "widen the boundary policy",
            lambda: iam.create_policy_version(PolicyArn=boundary, PolicyDocument=EVERYTHING, SetAsDefault=True),
            True,
        ),
        ("delete the boundary policy", lambda: iam.delete_policy(PolicyArn=boundary), True),
    ]


def cmd_escalation(args: argparse.Namespace) -> int:
    from botocore.exceptions import ClientError

    policies = load_policies()
    for i, extra in enumerate(args.extra_policy):
        policies[f"extra-{i}"] = json.loads(extra)
    os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = str(bootstrap_calls(len(policies)))  # before anything imports moto
    failures = []
    with moto_server(Authorizer(), bootstrap_calls(len(policies))) as url:
        deployer, admin = bootstrap(url, policies)
        account = client(url, "sts", admin).get_caller_identity()["Account"]
        boundary = f"arn:aws:iam::{account}:policy/{NAME}-{BOUNDARY}"
        for what, attempt, should_refuse in escalation_attempts(client(url, "iam", deployer), boundary):
            note = ""
            try:
                attempt()
                refused = False
            except ClientError as e:
                # Anything but a refusal means IAM let the call through (the service may still say no).
                refused = e.response["Error"]["Code"] in ("AccessDenied", "AccessDeniedException")
                note = "" if refused else f" (then {e.response['Error']['Code']})"
            verdict = "refused" if refused else "allowed"
            log(f"  {verdict}: {what}{note}")
            if refused != should_refuse:
                failures.append(what)
    if failures:
        log(f"FAIL: {'; '.join(failures)}")
        return 1
    log("PASS: the deployer cannot create a role without the boundary, nor remove, replace or widen it")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--log", required=True, help="JSON lines: every authorization decision")
    run.add_argument("--without", action="append", default=[], metavar="SID", help="drop this statement first")
    run.set_defaults(func=cmd_run)
    need = sub.add_parser("needs")
    need.add_argument("--log", required=True)
    need.set_defaults(func=cmd_needs)
    escalation = sub.add_parser("escalation")
    escalation.add_argument(
        "--extra-policy", action="append", default=[], metavar="JSON", help="also attach this policy to the deployer"
    )
    escalation.set_defaults(func=cmd_escalation)
    args = parser.parse_args()
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
