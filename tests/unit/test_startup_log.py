"""vLLM's start, read from its own log: a real vLLM 0.32 CPU server's, and the lines its GPU workers log."""

from __future__ import annotations

from pathlib import Path

from capserve.core.rollout.startup_log import EngineStartup, engine_startup_from_log

# The start of a real `vllm serve` of SmolLM2-135M on this machine's CPU (vLLM 0.32.0, the project's .venv-vllm).
CPU_LOG = (Path(__file__).parent / "fixtures" / "vllm-0.32-cpu-startup.log").read_text()

# What a GPU start adds, each line in the format of its vLLM 0.32 log call (the paths in startup_log's docstring),
# for two ranks: the slowest rank's figure is the phase's.
GPU_LINES = (Path(__file__).parent / "fixtures" / "vllm-0.32-gpu-startup-lines.log").read_text()


def test_a_real_cpu_servers_log_gives_its_weights_load_engine_init_kv_cache_and_time_to_listening() -> None:
    startup = engine_startup_from_log(CPU_LOG)
    assert startup == EngineStartup(
        to_listening_s=51.0,  # 09:32:54, its first stamped line, to 09:33:45 "Starting vLLM server"
        weights_load_s=1.26,
        engine_init_s=3.24,
        kv_cache_tokens=46_592,
    )


def test_gpu_phases_take_the_slowest_rank_and_a_start_across_the_new_year() -> None:
    startup = engine_startup_from_log(GPU_LINES)
    assert startup == EngineStartup(
        to_listening_s=10 * 60 + 7,  # 12-31 23:50:02 to 01-01 00:00:09
        model_load_s=1830.119004,
        compile_s=2403.17,
        graph_capture_s=41.0,
        engine_init_s=2711.83,
        kv_cache_tokens=1_234_567,
    )


def test_a_log_that_says_nothing_of_the_start_gives_nothing() -> None:
    startup = engine_startup_from_log("INFO:     Application startup complete.\nno vLLM lines here\n")
    assert not startup.said_anything
