"""The media handlers, built on ffprobe and ffmpeg: mediainfo, transcode and thumbnail."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from typing import Any

from popclient.handlers.process import run_subprocess, tail
from popclient.handlers.registry import HandlerError, OperationContext, PermanentError


def require_program(program: str, operation_type: str) -> str:
    path = shutil.which(program)
    if path is None:
        raise HandlerError(
            f"'{operation_type}' operations need {program}, which is not installed on this "
            f"worker (not found on PATH). Install ffmpeg (Debian: apt-get install ffmpeg) "
            f"or route '{operation_type}' operations to an insight whose workers have it.",
            code="missing_program",
        )
    return path


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _rate(value: Any) -> float | None:
    if not isinstance(value, str) or "/" not in value:
        return _number(value)
    numerator, _, denominator = value.partition("/")
    num, den = _number(numerator), _number(denominator)
    if num is None or not den:
        return None
    return round(num / den, 3)


def summarize_probe(probe: Mapping[str, Any]) -> dict[str, Any]:
    """The fields people reference most, from ffprobe's ``-show_format -show_streams``."""
    fmt = probe.get("format") or {}
    streams = probe.get("streams") or []
    video = next((s for s in streams if s.get("codec_type") == "video"), None)
    audio = next((s for s in streams if s.get("codec_type") == "audio"), None)
    summary: dict[str, Any] = {
        "format": fmt.get("format_name"),
        "duration": _number(fmt.get("duration")),
        "size": int(fmt["size"]) if str(fmt.get("size", "")).isdigit() else None,
        "bit_rate": int(fmt["bit_rate"]) if str(fmt.get("bit_rate", "")).isdigit() else None,
        "streams": len(streams),
        "has_video": video is not None,
        "has_audio": audio is not None,
    }
    if video is not None:
        summary.update(
            video_codec=video.get("codec_name"),
            width=video.get("width"),
            height=video.get("height"),
            frame_rate=_rate(video.get("avg_frame_rate") or video.get("r_frame_rate")),
        )
    if audio is not None:
        summary.update(
            audio_codec=audio.get("codec_name"),
            sample_rate=int(audio["sample_rate"])
            if str(audio.get("sample_rate", "")).isdigit()
            else None,
            channels=audio.get("channels"),
        )
    return summary


def _missing_local_file(source: str) -> bool:
    """A local path with nothing there: no later attempt will find it either (a URL may
    answer next time, so failing to read one stays retryable)."""
    return "://" not in source and not os.path.exists(source)


def require_input(source: str) -> None:
    if _missing_local_file(source):
        raise PermanentError(f"input not found: {source}", code="input_not_found")


def ffprobe(path: str, ctx: OperationContext, operation_type: str) -> dict[str, Any]:
    program = require_program("ffprobe", operation_type)
    result = run_subprocess(
        [program, "-v", "error", "-print_format", "json", "-show_format", "-show_streams", path],
        ctx,
    )
    if result.returncode != 0:
        failure = PermanentError if _missing_local_file(path) else HandlerError
        raise failure(
            f"ffprobe could not read {path}: {tail(result.stderr, 500).strip()}",
            code="probe_failed",
        )
    try:
        return json.loads(result.stdout)
    except ValueError as exc:
        raise HandlerError(f"ffprobe printed invalid JSON: {exc}", code="probe_failed") from exc


def input_output(payload: Any, *, need_output: bool = True) -> tuple[str, str]:
    if not isinstance(payload, Mapping) or not payload.get("input"):
        raise PermanentError("payload needs an input (path or URL)", code="invalid_payload")
    output = payload.get("output")
    if need_output and not output:
        raise PermanentError("payload needs an output path", code="invalid_payload")

    if output:
        directory = os.path.dirname(str(output))
        if directory:
            os.makedirs(directory, exist_ok=True)
    return str(payload["input"]), str(output or "")


def mediainfo_handler(payload: Any, ctx: OperationContext) -> Any:
    """ffprobe ``input``: result is ffprobe's JSON (``format``, ``streams``) plus ``summary``."""
    source, _ = input_output(payload, need_output=False)
    probe = ffprobe(source, ctx, "mediainfo")
    probe["summary"] = summarize_probe(probe)
    return probe


def run_ffmpeg(
    arguments: list[str],
    ctx: OperationContext,
    operation_type: str,
    duration: float | None,
    *,
    span: tuple[int, int] = (0, 100),
) -> None:
    """Run ffmpeg, reporting its progress as a percent within `span` of the operation's."""
    ffmpeg = require_program("ffmpeg", operation_type)
    first, end = span
    last = [-1]

    def on_line(line: str) -> None:
        key, _, value = line.partition("=")
        if key in ("out_time_us", "out_time_ms") and duration:
            seconds = (_number(value) or 0) / 1_000_000
            percent = int(min(end - 1, first + seconds / duration * (end - first)))
            if percent > last[0]:
                last[0] = percent
                ctx.report_progress(percent)

    argv = [ffmpeg, "-hide_banner", "-nostdin", "-nostats", "-progress", "pipe:1", *arguments]
    result = run_subprocess(argv, ctx, on_stdout_line=on_line)
    if result.returncode != 0:
        raise HandlerError(
            f"ffmpeg failed with status {result.returncode}: {tail(result.stderr, 800).strip()}",
            code="ffmpeg_failed",
            detail={"argv": argv, "stderr": tail(result.stderr)},
        )
    ctx.report_progress(end)


def _media_duration(source: str, payload: Mapping[str, Any], ctx: OperationContext) -> float | None:
    if payload.get("duration") is not None:
        return _number(payload["duration"])
    if shutil.which("ffprobe") is None:
        return None
    try:
        return summarize_probe(ffprobe(source, ctx, "transcode")).get("duration")
    except HandlerError:
        return None


def transcode_handler(payload: Any, ctx: OperationContext) -> Any:
    """ffmpeg ``input`` → ``output``. Optional: ``video_codec``, ``audio_codec``, ``width``,
    ``height``, ``video_bitrate``, ``audio_bitrate``, ``preset``, ``input_args`` (list, before
    ``-i``), ``extra_args`` (list, output options),
    ``overwrite`` (true). Reports percent from ffmpeg's progress. Result: ``{output,
    size_bytes, outputs, summary?}``."""
    source, output = input_output(payload)
    require_program("ffmpeg", "transcode")
    require_input(source)
    input_args = payload.get("input_args") or []
    if not isinstance(input_args, list):
        raise PermanentError("input_args must be a list", code="invalid_payload")
    arguments: list[str] = ["-y" if payload.get("overwrite", True) else "-n"]
    arguments += [str(arg) for arg in input_args]
    arguments += ["-i", source]
    options = [
        ("video_codec", "-c:v"),
        ("video_bitrate", "-b:v"),
        ("preset", "-preset"),
        ("audio_codec", "-c:a"),
        ("audio_bitrate", "-b:a"),
    ]
    for key, flag in options:
        if payload.get(key) is not None:
            arguments += [flag, str(payload[key])]
    width, height = payload.get("width"), payload.get("height")
    if width is not None or height is not None:
        arguments += [
            "-vf",
            f"scale={width if width is not None else -2}:{height if height is not None else -2}",
        ]
    extra = payload.get("extra_args") or []
    if not isinstance(extra, list):
        raise PermanentError("extra_args must be a list", code="invalid_payload")
    arguments += [str(arg) for arg in extra]
    arguments.append(output)
    run_ffmpeg(arguments, ctx, "transcode", _media_duration(source, payload, ctx))
    result = file_result(output, "video")
    if shutil.which("ffprobe") is not None:
        result["summary"] = summarize_probe(ffprobe(output, ctx, "transcode"))
    return result


def thumbnail_handler(payload: Any, ctx: OperationContext) -> Any:
    """One frame of ``input`` at ``at_seconds`` (0) into ``output`` (an image path),
    optionally scaled to ``width``. Result: ``{output, size_bytes, outputs}``."""
    source, output = input_output(payload)
    require_program("ffmpeg", "thumbnail")
    require_input(source)
    at = _number(payload.get("at_seconds", 0)) or 0.0
    arguments = ["-y", "-ss", f"{at:.3f}", "-i", source, "-frames:v", "1"]
    if payload.get("width") is not None:
        arguments += ["-vf", f"scale={int(payload['width'])}:-2"]
    arguments.append(output)
    run_ffmpeg(arguments, ctx, "thumbnail", None)
    if not os.path.exists(output):
        raise HandlerError(f"ffmpeg wrote no frame at {at}s (past the end?)", code="ffmpeg_failed")
    return file_result(output, "image")


def file_result(path: str, kind: str) -> dict[str, Any]:
    """The result of a handler that wrote one file: ``output`` and ``size_bytes``, and the same
    file in the outputs convention every handler follows (``outputs: [{path or url, kind,
    bytes}]``), which the server lists on the agenda's page, in the API and in callbacks."""
    size = os.path.getsize(path)
    return {
        "output": path,
        "size_bytes": size,
        "outputs": [{"path": path, "kind": kind, "bytes": size}],
    }
