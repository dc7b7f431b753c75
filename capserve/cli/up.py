"""``capserve up SPEC.yaml``: run a campaign, for real or against the sandbox."""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from capserve.cli import sandbox
from capserve.cli.console import block_unused, plain_console, print_summary, read_report
from capserve.cli.exit_codes import ExitCode
from capserve.cli.inputs import api_key_option, endpoint_option, load_option, writable_dir
from capserve.cli.sandbox_checks import Promise, StandInFailed, kept, stop_on_failure
from capserve.cli.stand_ins import stand_in
from capserve.core.errors import CapserveError, SpecError
from capserve.core.spec import load_spec, new_campaign_problems
from capserve.tasks.secrets import redact

if TYPE_CHECKING:
    from rich.console import Console


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "up",
        help="run a campaign from a spec",
        description="Run the campaign a spec describes: plan, and the stages after it, then write the report.",
    )
    parser.add_argument("spec", type=Path, help="campaign spec (YAML)")
    sandbox.up_options(parser)  # --sandbox and how its block is played
    parser.add_argument("--out", type=Path, default=None, help="report folder (default: out/<campaign>)")
    parser.add_argument(
        "--teardown-when-done",
        action="store_true",
        help="tear down as soon as the stages finish, instead of at the lease's hard-teardown time: a block that "
        "starts later is then lost unserved, its fee paid (asks to confirm; --yes confirms; exit 1 when the block "
        "ends up unused)",
    )
    parser.add_argument(
        "--yes",
        dest="interactive",
        action="store_false",
        help="never prompt: confirms --teardown-when-done; with --in-process a purchase above the approval threshold "
        "waits for approval in the Prefect UI (a deployment run always does)",
    )
    parser.add_argument(
        "--evaluate-url",
        default=None,
        metavar="URL",
        help="with --in-process: OpenAI-compatible endpoint to evaluate instead of the one the rollout stage "
        "serves; user:password@ in it is used for HTTP Basic authentication and never stored",
    )
    parser.add_argument(
        "--api-key-env",
        default=None,
        metavar="NAME",
        help="with --in-process and --evaluate-url: environment variable holding that endpoint's API key "
        "(checked before anything runs)",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run the campaign in this process on Prefect's temporary server (no scheduled run ever fires), "
        "instead of as a deployment run on a real Prefect server: a local one with a worker when "
        "PREFECT_API_URL is unset, else that one",
    )
    parser.add_argument(
        "--keep-server", action="store_true", help="leave the local Prefect server and worker up when done"
    )
    parser.set_defaults(func=run)


def refuse_unhonoured_options(args: argparse.Namespace) -> None:
    """Refuse ``--evaluate-url`` / ``--api-key-env`` on a Prefect server: there the evaluation runs in the ``serve``
    run the lease schedules whenever the block starts after the purchase, and that run takes nothing but the
    campaign's name, region and reservation (``capserve.flows.window``) and evaluates the endpoint it rolled out.
    Carrying the options to it would put them in the campaign record and need the key in every worker (one of the
    user's, on their server); an option silently dropped would evaluate, and pass, another endpoint than asked."""
    given = [option for option, value in (("--evaluate-url", args.evaluate_url), ("--api-key-env", args.api_key_env))
             if value is not None]
    if given and not args.in_process:
        raise SpecError(
            f"{' and '.join(given)}: only with --in-process (on a Prefect server the evaluation runs in the serve "
            "run the lease schedules, which evaluates the endpoint it rolled out); add --in-process, or evaluate "
            "another endpoint with `capserve eval --url`"
        )
    sandbox.refuse_up_on_your_server(args)


def confirm_teardown_when_done(args: argparse.Namespace, console: Console) -> None:
    """``--teardown-when-done`` tears the cluster down once the stages finish: on a block that has not started, or
    has not been served yet, that loses the block (its fee is paid up front and never refunded, docs/cli.md). Asked
    on a terminal, refused elsewhere without ``--yes``: money is not lost on a default."""
    if not args.teardown_when_done or not args.interactive:
        return
    risk = ("--teardown-when-done tears the cluster down as soon as the stages finish: a block that has not started "
            "or not been served by then is lost unserved, its fee paid")
    if not sys.stdin.isatty():
        raise SpecError(f"{risk}; add --yes to confirm, or drop --teardown-when-done to serve until the scheduled "
                        "drain")
    answer = console.input(f"{escape(risk)}. Tear down when done? [y/N] ")
    if answer.strip().lower() not in ("y", "yes"):
        raise SpecError("--teardown-when-done not confirmed: drop it to serve until the scheduled drain, or answer "
                        "y (or add --yes)")


def interrupted_in_process(args: argparse.Namespace) -> str:
    """What an interrupted ``--in-process`` campaign leaves: it ran in this command, and the runner tears nothing
    down on an interruption (``capserve.campaign.runner``); Prefect's temporary server fires no scheduled run."""
    if args.sandbox:
        return ("stopped: the campaign ran in this command against the sandbox's stand-ins, which stop with it: "
                "the campaign cannot go on, nothing real was bought or built, nothing is left to clean up")
    return (f"stopped: the campaign ran in this command and stops with it; no scheduled run fires on Prefect's "
            f"temporary server, so what it made in AWS stays until `capserve down {args.spec}` (a bought Capacity "
            "Block is not refunded: `capserve up` again adopts it)")


def run(args: argparse.Namespace) -> int:
    console = plain_console(stderr=True)
    # Every input is checked before anything runs, so a bad one never costs a purchase.
    try:
        spec = load_spec(args.spec)
        refused = new_campaign_problems(spec, now=datetime.now(UTC))
        if refused:
            lines = "\n".join(f"  {p}" for p in refused)
            raise SpecError(f"{args.spec}: nothing can be bought for this spec now\n{lines}")
        refuse_unhonoured_options(args)
        confirm_teardown_when_done(args, console)
        endpoint_url, basic_auth_env = (None, None)
        if args.evaluate_url is not None:
            endpoint_url, basic_auth_env = endpoint_option(args.evaluate_url, "--evaluate-url")
        api_key_option(args.api_key_env, basic_auth_env)
        if args.api_key_env is not None and endpoint_url is None:
            raise SpecError(
                "--api-key-env names the key of the endpoint given with --evaluate-url; without it the campaign "
                "evaluates the endpoint it rolled out, with the key it made itself: drop --api-key-env"
            )
        if endpoint_url is not None or args.sandbox:
            load_option(spec.evaluation.load, f"{args.spec}: evaluation.load")
        if spec.evaluation.quality.golden_path:
            # Read now, not after the rollout: a missing or malformed golden set must cost nothing.
            from capserve.core.evaluation.quality import golden_from_file

            golden_from_file(spec.evaluation.quality.golden_path)
        stand_ins = stand_in("environment") if args.sandbox else None  # a production install has none: exit 2
        if not args.sandbox:
            # Before any server starts or anything is planned: missing or refused credentials are one line (exit 2),
            # an STS that cannot be reached exit 4.
            from capserve.tasks.locations import caller_arn

            console.print(f"AWS credentials: {caller_arn(spec.capacity.regions[0])}", highlight=False)
        out_dir: Path = writable_dir(args.out or Path("out") / spec.campaign_id, "--out")
    except SpecError as exc:
        console.print(f"[red]error:[/red] {escape(redact(str(exc)))}", highlight=False)
        return ExitCode.BAD_INPUT

    from capserve.runtime.watchdog import watch

    # Before any server, worker or stand-in starts: killed outright, this command leaves none of them running.
    watch()
    if args.sandbox:
        # The sandbox is offline by design: Prefect's temporary server would only log failed telemetry.
        os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # Imported here: prefect takes a second to import, and `capserve up --help` should not wait.
    from capserve.cli.signals import defer_prefect_handler_in_finalizers, skip_the_final_collection

    defer_prefect_handler_in_finalizers()  # a flow run in this process must not lose a SIGTERM either
    skip_the_final_collection()
    on_your_server = not args.in_process and "PREFECT_API_URL" in os.environ
    if on_your_server:
        # Before the sandbox or anything else starts: a server without capserve's deployments can run nothing.
        from capserve.cli._server import require_deployments

        require_deployments(console)

    endpoint_note: str | None = None
    hub_endpoint: str | None = None
    started: sandbox.StartedForUp | None = None
    promise: Promise | None = None  # on the sandbox: what the run must show before it says 0
    with ExitStack() as stack:
        server = None
        if not args.in_process:
            from capserve.cli._server import server_in_background

            # The server boots and the deployments register while the sandbox comes up.
            server = stack.enter_context(server_in_background(out_dir, keep_server=args.keep_server, console=console))
        if stand_ins is not None:
            started = stack.enter_context(sandbox.started_for_up(stand_ins, args, spec, out_dir=out_dir,
                                                                 console=console))
            hub_endpoint, promise = started.hub, started.promise
            # The rollout stage serves the model in the sandbox's Kubernetes (a local process per pod) and
            # the evaluation reaches it through a port-forward; --evaluate-url evaluates another endpoint.
        if server is not None:
            from capserve.cli._server import run_on_server

            parameters = {
                "spec": spec.model_dump(mode="json"), "out_dir": str(out_dir.resolve()), "hub_endpoint": hub_endpoint,
                "endpoint_url": endpoint_url, "endpoint_note": endpoint_note, "api_key_env": args.api_key_env,
                "basic_auth_env": basic_auth_env, "teardown_when_done": args.teardown_when_done,
            }
            from capserve.tasks.reporting import REPORT_DIR_ENV

            # The worker this command starts writes the campaign's report where this command reads it: the scheduled
            # runs (serve, teardown) and the redeploys get only the campaign id, and render the report there.
            worker_env = {REPORT_DIR_ENV: str(out_dir.resolve())}
            if hub_endpoint:
                worker_env["CAPSERVE_HUB_ENDPOINT"] = hub_endpoint
            run_env: dict[str, str] = {}
            if started is not None and on_your_server:
                # A worker of yours was started before this sandbox, so its environment cannot name the stand-ins'
                # ports: the campaign run carries them (dummy credentials only) as its `env` job variable, which
                # Prefect merges into the flow process's environment (docs/prefect.md §13). Loopback addresses:
                # the worker must run on this host.
                run_env = started.worker_environment()
            watches = started.hub_watches(spec.capacity.regions) if started is not None else None
            try:
                code = run_on_server(
                    parameters, campaign_id=spec.campaign_id, out_dir=out_dir, worker_env=worker_env,
                    run_env=run_env, keep_server=args.keep_server, console=console, server=server,
                    # On a server the campaign run prepares and buys; serving and the teardown are the scheduled
                    # runs, so the command follows them whether or not --teardown-when-done was given.
                    follow_window=True, watches=watches, sandbox=args.sandbox,
                    teardown_when_done=args.teardown_when_done,
                    health=stop_on_failure(promise.failures) if promise is not None else None,
                )
            except StandInFailed:
                code = ExitCode.FAILED  # kept() names the stand-in
            return kept(code, promise, out_dir=out_dir, console=console)
        from capserve.campaign.context import TERMINAL_APPROVAL
        from capserve.flows.campaign import campaign

        asking = TERMINAL_APPROVAL.set(args.interactive and sys.stdin.isatty())
        try:
            report = campaign(
                spec,
                out_dir=out_dir,
                hub_endpoint=hub_endpoint,
                endpoint_url=endpoint_url,
                endpoint_note=endpoint_note,
                api_key_env=args.api_key_env,
                basic_auth_env=basic_auth_env,
                teardown_when_done=args.teardown_when_done,
            )
        except SpecError as exc:  # preflight: a problem found before anything was bought or created
            console.print(f"[red]error:[/red] {escape(redact(str(exc)))}", highlight=False)
            print_summary(out_dir)
            return kept(ExitCode.BAD_INPUT, promise, out_dir=out_dir, console=console)
        except CapserveError as exc:
            stopped = escape(redact(str(exc)))
            console.print(f"[red]campaign {spec.campaign_id} stopped:[/red] {stopped}", highlight=False)
            print_summary(out_dir)
            return kept(ExitCode.FAILED, promise, out_dir=out_dir, console=console)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM (capserve.cli.signals): what is true in this mode, the summary
            console.print(interrupted_in_process(args), highlight=False)
            print_summary(out_dir)
            return ExitCode.INTERRUPTED
        finally:
            TERMINAL_APPROVAL.reset(asking)
    # Run in this process (not as a deployment run), the campaign returns its report, never a state; the summary
    # reads the report.json it wrote, as the server path does.
    from capserve.core.report import CampaignReport

    assert isinstance(report, CampaignReport)  # noqa: S101 - narrows the type for mypy
    print_summary(out_dir)
    # A campaign whose endpoint failed its gates did its job, but what it serves is not acceptable
    # (1); one whose evaluation could not judge everything says so (3): scripts must be able to tell. A block torn
    # down unserved by --teardown-when-done is a failure whatever the verdict (1).
    if args.teardown_when_done and block_unused(read_report(out_dir) or {}):
        return ExitCode.FAILED
    verdict = report.evaluation.verdict if report.evaluation is not None else None
    code = {"fail": ExitCode.FAILED, "invalid": ExitCode.INVALID}.get(str(verdict), ExitCode.OK)
    return kept(code, promise, out_dir=out_dir, console=console)
