"""The ``package`` handler: HLS and DASH for adaptive streaming from one input, with ffmpeg.

Payload: ``input`` (a path or URL), ``output_dir``; optional ``formats`` (``["hls", "dash"]``),
``segment_seconds`` (4), ``renditions`` (a list of ``{height, video_bitrate,
audio_bitrate}``; default one at the source's height), ``video_codec`` (``libx264``),
``audio_codec`` (``aac``), ``preset`` (``veryfast``). Every rendition is encoded with key
frames on segment boundaries, so the renditions switch cleanly. Percent comes from ffmpeg's
progress (HLS then DASH). Result: ``{outputs: [{path, kind, bytes}], hls, dash, renditions}``,
``hls`` the master playlist and ``dash`` the manifest.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from popclient.handlers.media import (
    ffprobe,
    input_output,
    require_input,
    require_program,
    run_ffmpeg,
    summarize_probe,
)
from popclient.handlers.registry import OperationContext, PermanentError

FORMATS = ("hls", "dash")
MAX_RENDITIONS = 8


def _renditions(payload: Mapping[str, Any], source_height: int | None) -> list[dict[str, Any]]:
    given = payload.get("renditions")
    if given is None:
        return [{"height": source_height, "video_bitrate": None, "audio_bitrate": None}]
    if not isinstance(given, list) or not 1 <= len(given) <= MAX_RENDITIONS:
        raise PermanentError(
            f"renditions must be a list of 1 to {MAX_RENDITIONS} objects", code="invalid_payload"
        )
    renditions = []
    for number, item in enumerate(given):
        if not isinstance(item, Mapping):
            raise PermanentError(f"renditions.{number} must be an object", code="invalid_payload")
        height = item.get("height")
        if height is not None and (
            isinstance(height, bool) or not isinstance(height, int) or not 16 <= height <= 4320
        ):
            raise PermanentError(
                f"renditions.{number}.height must be a whole number of pixels (16-4320)",
                code="invalid_payload",
            )
        renditions.append(
            {
                "height": height,
                "video_bitrate": item.get("video_bitrate"),
                "audio_bitrate": item.get("audio_bitrate"),
            }
        )
    return renditions


def _encoding(
    payload: Mapping[str, Any], renditions: list[dict[str, Any]], *, audio: bool, segment: float
) -> list[str]:
    """ffmpeg options after ``-i``: one video (and audio) output stream per rendition."""
    split = f"[0:v]split={len(renditions)}" + "".join(f"[s{n}]" for n in range(len(renditions)))
    scales = [
        f"[s{n}]scale=-2:{item['height']}[v{n}]" if item["height"] else f"[s{n}]null[v{n}]"
        for n, item in enumerate(renditions)
    ]
    arguments = ["-filter_complex", ";".join([split, *scales])]
    for number, item in enumerate(renditions):
        arguments += ["-map", f"[v{number}]"]
        if audio:
            arguments += ["-map", "0:a:0"]
        if item["video_bitrate"]:
            arguments += [f"-b:v:{number}", str(item["video_bitrate"])]
        if audio and item["audio_bitrate"]:
            arguments += [f"-b:a:{number}", str(item["audio_bitrate"])]
    arguments += [
        "-c:v",
        str(payload.get("video_codec") or "libx264"),
        "-preset",
        str(payload.get("preset") or "veryfast"),
        "-sc_threshold",
        "0",
        "-force_key_frames",
        f"expr:gte(t,n_forced*{segment:g})",
    ]
    if audio:
        arguments += ["-c:a", str(payload.get("audio_codec") or "aac")]
    return arguments


def _folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def package_handler(payload: Any, ctx: OperationContext) -> Any:
    """Package ``input`` for adaptive streaming (see the module docstring)."""
    source, _ = input_output(payload, need_output=False)
    output_dir = payload.get("output_dir")
    if not output_dir or not isinstance(output_dir, str):
        raise PermanentError("payload needs an output_dir", code="invalid_payload")
    formats = payload.get("formats", list(FORMATS))
    if not isinstance(formats, list) or not formats or any(kind not in FORMATS for kind in formats):
        raise PermanentError(
            f"formats must be a non-empty list of {', '.join(FORMATS)}", code="invalid_payload"
        )
    segment = payload.get("segment_seconds", 4)
    if isinstance(segment, bool) or not isinstance(segment, int | float) or not 1 <= segment <= 60:
        raise PermanentError("segment_seconds must be 1 to 60", code="invalid_payload")
    require_program("ffmpeg", "package")
    require_input(source)
    summary = summarize_probe(ffprobe(source, ctx, "package"))
    if not summary.get("video_codec"):
        raise PermanentError(f"{source} has no video stream to package", code="invalid_input")
    audio = bool(summary.get("has_audio"))
    renditions = _renditions(payload, summary.get("height"))
    encoding = _encoding(payload, renditions, audio=audio, segment=float(segment))
    root = Path(output_dir)
    outputs: list[dict[str, Any]] = []
    result: dict[str, Any] = {"renditions": renditions}
    share = 100 // len(formats)
    for number, kind in enumerate(formats):
        folder = root / kind
        folder.mkdir(parents=True, exist_ok=True)
        span = (number * share, 100 if number == len(formats) - 1 else (number + 1) * share)
        if kind == "hls":
            streams = " ".join(
                f"v:{n},a:{n}" if audio else f"v:{n}" for n in range(len(renditions))
            )
            target = folder / "master.m3u8"
            muxer = [
                "-f", "hls", "-hls_time", f"{segment:g}", "-hls_playlist_type", "vod",
                "-hls_segment_filename", str(folder / "stream_%v" / "segment_%04d.ts"),
                "-master_pl_name", "master.m3u8", "-var_stream_map", streams,
                str(folder / "stream_%v" / "index.m3u8"),
            ]  # fmt: skip
        else:
            target = folder / "manifest.mpd"
            sets = "id=0,streams=v id=1,streams=a" if audio else "id=0,streams=v"
            muxer = [
                "-f", "dash", "-seg_duration", f"{segment:g}", "-use_template", "1",
                "-use_timeline", "1", "-adaptation_sets", sets, str(target),
            ]  # fmt: skip
        run_ffmpeg(
            ["-y", "-i", source, *encoding, *muxer],
            ctx,
            "package",
            summary.get("duration"),
            span=span,
        )
        if not target.exists():
            raise PermanentError(f"ffmpeg wrote no {target.name}", code="ffmpeg_failed")
        result[kind] = str(target)
        outputs.append({"path": str(target), "kind": kind, "bytes": _folder_bytes(folder)})
    result["outputs"] = outputs
    result["output_dir"] = os.fspath(root)
    return result
