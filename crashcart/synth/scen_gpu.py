"""Synth scenarios for GPU/PCIe hardware classes: the clue is in one node's kernel log (Xid, SXid,
AER), a Megatron rerun verdict, or DCGM telemetry only; the victim rank shows only a symptom.

Input/output: a Story (one function per TAXONOMY class). Pure, no I/O.
"""

from __future__ import annotations

from crashcart.synth import formats as fmt
from crashcart.synth import kit
from crashcart.synth.story import Story, Telemetry

U = "<unknown>"  # fmt.xid(name=U) prints pid='<unknown>', name=<unknown>


def _victim(s: Story) -> tuple[int, int, str]:
    r = s.pick_rank()
    return r, s.node_of(r), s.world.bus(r)


def gpu_fallen_off_bus(s: Story) -> None:
    w, rng = s.world, s.rng
    r, n, pci = _victim(s)
    s.set_culprit(n, None, pci)
    s.xid45 = True
    first = kit.pick(
        s,
        (
            fmt.xid(pci, 79, "GPU has fallen off the bus.", name=U),
            f"NVRM: Xid (PCI:{pci}): 79, pid=0, GPU has fallen off the bus.",
            f"NVRM: Xid (PCI:{pci}): 79, GPU has fallen off the bus.",
        ),
    )
    msgs = [
        first,
        f"NVRM: GPU {pci}.0: GPU has fallen off the bus.",
        f"NVRM: GPU at PCI:{pci}: {kit.uuid(s)}",
        f"NVRM: GPU Board Serial Number: 16549220{rng.randrange(10000, 99999)}",
    ]
    end = kit.kernel_lines(s, n, s.t0, msgs, roots=(0, 1))
    if rng.random() < 0.5:
        s.kernel(
            n,
            end + 0.4,
            fmt.xid(pci, 154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"),
            symptom="gpu_engine_hang_reset_required",
        )
    kit.gpu_victim(
        s, r, s.t0 + rng.uniform(0.3, 3.0), "unknown error", how=kit.pick(s, ("crash", "crash", "heartbeat"))
    )
    if rng.random() < 0.5:
        s.telemetry = Telemetry("missing", n, w.local[r], s.t0)


def gpu_memory_ecc_uncorrectable(s: Story) -> None:
    w, rng = s.world, s.rng
    r, n, pci = _victim(s)
    s.set_culprit(n, None, pci)
    s.xid45 = rng.random() < 0.7
    v = rng.randrange(3)
    if v == 0:
        addr = rng.randrange(0x10000000, 0x7FFFFFFF)
        msgs = [
            fmt.xid(
                pci,
                48,
                f"An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
                f"at physAddr 0x{addr:x} partition {rng.randrange(32)}, subpartition {rng.randrange(4)}.",
                name=U,
            ),
            fmt.xid(
                pci,
                63,
                f"Row Remapper: New row (0x{addr:016x}) marked for remapping, reset gpu to activate.",
                name=U,
            ),
        ]
        roots: tuple[int, ...] = (0, 1)
    elif v == 1:
        msgs, roots = [fmt.xid(pci, 94, "Contained: SM (0x1). RST: No, D-RST: No", pid=w.pid[r])], (0,)
    else:
        msgs, roots = [fmt.xid(pci, 95, "Uncontained: FBHUB. RST: Yes, D-RST: No", pid=w.pid[r])], (0,)
    kit.kernel_lines(s, n, s.t0, msgs, roots=roots)
    t = s.t0 + rng.uniform(0.05, 1.0)
    if rng.random() < 0.5:
        kit.gpu_victim(s, r, t, "uncorrectable ECC error encountered")
    else:
        kit.watchdog_exception(s, r, t, "uncorrectable ECC error encountered", root=False, symptom="cuda_kernel_fault")


def _nvlink_victim(s: Story, r: int, t: float) -> None:
    failure = "Cuda failure 'an uncorrectable NVLink error was detected during the execution'"
    s.nccl(r, t, failure, level="WARN", src="enqueue.cc:1559", tid=2, symptom="cuda_kernel_fault")
    kit.nccl_error(s, r, t + 0.01, "cuda", failure, symptom="cuda_kernel_fault")


def gpu_nvlink_error(s: Story) -> None:
    w, rng = s.world, s.rng
    r, n, pci = _victim(s)
    s.set_culprit(n, None, pci)
    s.xid45 = True
    link = rng.randrange(18 if w.gpu_kind == "h100" else 12)
    msg = kit.pick(
        s,
        (
            f"NVRM: Xid (PCI:{pci}): 74, pid=<unknown>, name=<unknown>, NVLink: fatal error detected on link "
            f"{link}"
            "(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)",
            fmt.xid(pci, 74, f"NVLink: fatal error detected on link {link}", name=U),
        ),
    )
    kit.kernel_lines(s, n, s.t0, [msg])
    _nvlink_victim(s, r, s.t0 + rng.uniform(0.05, 0.8))


def _fm(s: Story, n: int, t: float, level: str, msg: str, *, root: bool = False) -> None:
    stamp = s.world.at(t).strftime("%b %d %Y %H:%M:%S")
    s.emit(("fm", n), t, f"[{stamp}] [{level}] [tid {841 + n}] {msg}", root=root)


def nvswitch_fabric_manager_error(s: Story) -> None:
    w, rng = s.world, s.rng
    n = rng.randrange(len(w.nodes))
    s.set_culprit(n, None, None)
    tb = w.nodes[n].boot + 42.0
    _fm(
        s,
        n,
        tb,
        "INFO",
        f"Fabric Manager version {w.stack.driver} is running with the following configuration options",
    )
    _fm(s, n, tb + 0.001, "INFO", "Logging level = 4")
    sw = rng.randrange(4)
    swpci = f"0000:{('05', '06', '07', '08')[sw]}:00.0"
    if rng.random() < 0.6:
        _fm(
            s,
            n,
            tb + 3.0,
            "INFO",
            "Successfully configured all the available NVSwitches to route GPU NVLink traffic."
            " NVLink Peer-to-Peer support will be enabled once the GPUs are successfully registered with "
            "the NVLink "
            "fabric.",
        )
        port = rng.randrange(8, 64)
        kit.kernel_lines(
            s,
            n,
            s.t0,
            [
                f"nvidia-nvswitch{sw}: SXid (PCI:{swpci}): 20034, Fatal, Link {port} LTSSM Fault Up",
                f"nvidia-nvswitch{sw}: SXid (PCI:{swpci}): 20034, Severity 1 Engine instance {port} "
                "Sub-engine instance 00",
                f"nvidia-nvswitch{sw}: SXid (PCI:{swpci}): 20034, Data "
                f"{{0x00000000, 0x00000001, 0x00000000, 0x00000000, "
                "0x00000000, 0x00000000, 0x00000000, 0x00000000}",
            ],
        )
        _fm(
            s,
            n,
            s.t0 + 0.6,
            "ERROR",
            f"detected NVSwitch fatal error 20034 on fid 0 on NVSwitch pci bus id "
            f"{fmt.smi_busid(swpci[:10])} physical id {sw + 1} port {port}",
            root=True,
        )
        s.xid45 = True
        _nvlink_victim(s, w.nodes[n].ranks[0], s.t0 + rng.uniform(0.1, 1.0))
        return
    _fm(
        s,
        n,
        tb + 3.0,
        "ERROR",
        "detected number of NVSwitches don't match with any supported system topology, aborting fabric manager",
        root=True,
    )
    kit.startup(s, rng.uniform(8.0, 14.0), "banner")
    s.mode = "store"
    frames = [
        (f"/workspace/{w.script}", 412, "<module>", "main()"),
        (f"/workspace/{w.script}", 361, "main", "torch.cuda.set_device(local_rank)"),
        (
            "/usr/local/lib/python3.10/dist-packages/torch/cuda/__init__.py",
            399,
            "set_device",
            "torch._C._cuda_setDevice(device)",
        ),
    ]
    for r in w.nodes[n].ranks:
        kit.crash(s, r, s.t0 + 0.01 * w.local[r], kit.cuda_error("system not yet initialized"), frames=frames)


def gpu_gsp_firmware_error(s: Story) -> None:
    w, rng = s.world, s.rng
    r, n, pci = _victim(s)
    s.set_culprit(n, None, pci)
    s.xid45 = rng.random() < 0.5
    L = w.local[r]
    first = kit.pick(
        s,
        (
            fmt.xid(
                pci,
                119,
                f"Timeout after 6s of waiting for RPC response from GPU{L} GSP! Expected function 76 "
                "(GSP_RM_CONTROL) (0x20803032 0x58c).",
                pid=w.pid[r],
            ),
            fmt.xid(pci, 119, "Timeout waiting for RPC from GSP!", pid=rng.randrange(300, 900), name="nv_queue"),
        ),
    )
    kit.kernel_lines(
        s,
        n,
        s.t0,
        [
            first,
            f"NVRM: GPU{L} GSP RPC buffer contains function 76 (GSP_RM_CONTROL) and data 0x0000000020803032 "
            "0x000000000000058c.",
            f"NVRM: GPU{L} RPC history (CPU -> GSP):",
            "NVRM:     entry function                   data0              data1              ts_start      "
            "     ts_end  "
            "           duration actively_polling",
            "NVRM:      0    76   GSP_RM_CONTROL     0x0000000020803032 0x000000000000058c "
            f"0x{rng.getrandbits(52):016x} "
            "0x0000000000000000          y",
        ],
    )
    kit.gpu_victim(
        s,
        r,
        s.t0 + rng.uniform(0.5, 6.0),
        "unspecified launch failure",
        how=kit.pick(s, ("heartbeat", "hang", "crash")),
    )


def gpu_engine_hang_reset_required(s: Story) -> None:
    w, rng = s.world, s.rng
    r, n, pci = _victim(s)
    s.set_culprit(n, None, pci)
    ch = rng.randrange(1, 64)
    code = kit.pick(s, (109, 109, 8, 62, 46))
    msg = {
        109: f"Ch {ch:08x}, errorString CTX SWITCH TIMEOUT, Info 0x{rng.randrange(0x1000, 0x3FFFF):x}",
        8: f"Channel {ch:08x}",
        62: "0000(0000) 00000000 00000000",
        46: "GPU stopped processing",
    }[code]
    msgs = [fmt.xid(pci, code, msg, pid=w.pid[r])]
    if rng.random() < 0.5:
        msgs.append(fmt.xid(pci, 154, "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"))
    kit.kernel_lines(s, n, s.t0, msgs, roots=range(len(msgs)))
    kit.gpu_victim(s, r, s.t0 - rng.uniform(0.0, 2.0), "", how="heartbeat")


def gpu_app_fault_xid(s: Story) -> None:
    w, rng = s.world, s.rng
    r, n, pci = _victim(s)
    s.set_culprit(n, None, pci)
    ch = rng.randrange(1, 40)
    if rng.random() < 0.5:
        addr = f"0x{rng.randrange(0x7F00, 0x7FFF):x}_{rng.getrandbits(28):07x}000"
        first = fmt.xid(
            pci,
            31,
            f"Ch {ch:08x}, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC{rng.randrange(8)} "
            f"GPCCLIENT_T1_{rng.randrange(16)} faulted @ {addr}. Fault is of type FAULT_PDE "
            "ACCESS_TYPE_VIRT_READ",
            pid=w.pid[r],
        )
    else:
        first = fmt.xid(
            pci,
            13,
            f"Graphics SM Warp Exception on (GPC {rng.randrange(8)}, TPC {rng.randrange(9)}, SM "
            f"{rng.randrange(2)}): Out Of Range Address",
            pid=w.pid[r],
        )
    second = fmt.xid(pci, 43, f"Ch {ch:08x}", pid=w.pid[r])
    kit.kernel_lines(s, n, s.t0, [first, second], roots=(0, 1))
    kit.hang(s, r, s.t0)


def pcie_aer_error(s: Story) -> None:
    w, rng = s.world, s.rng
    r, n, pci = _victim(s)
    s.set_culprit(n, None, pci)
    dev = f"{pci}.0"
    bus = int(pci.split(":")[1], 16)
    port = f"{pci.split(':')[0]}:{max(bus - 1, 0):02x}:01.0"
    recv = kit.pick(s, (f"error received: {dev}", f"error message received from {dev}"))
    kit.kernel_lines(
        s,
        n,
        s.t0,
        [
            f"pcieport {port}: AER: Uncorrected (Fatal) {recv}",
            f"nvidia {dev}: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Requester ID)",
            f"nvidia {dev}:   device [{w.pci_id}] error status/mask=00004000/00000000",
            f"nvidia {dev}:    [14] CmplTO                 (First)",
            f"pcieport {port}: AER: Downstream Port link has been reset (0)",
            f"nvidia {dev}: AER: can't recover (no error_detected callback)",
            f"pcieport {port}: AER: device recovery failed",
        ],
        roots=(0, 1),
    )
    s.xid45 = rng.random() < 0.5
    kit.gpu_victim(s, r, s.t0 + rng.uniform(0.05, 2.0), kit.pick(s, ("unspecified launch failure", "unknown error")))


def _slow(s: Story, anomaly: str, factors: tuple[float, float]) -> None:
    w, rng = s.world, s.rng
    r, n, pci = _victim(s)
    onset = s.t0 - rng.uniform(900.0, 2400.0)
    s.slow_down(onset + 60.0, factors[0])
    s.slow_down(onset + 600.0, factors[1])
    s.telemetry = Telemetry(anomaly, n, w.local[r], onset)
    s.want_telemetry, s.xid45, s.mode = True, False, "timeout"
    s.set_culprit(n, None, pci)
    kit.hang(s, r, s.t0)


def gpu_thermal_power_throttling(s: Story) -> None:
    _slow(s, kit.pick(s, ("throttle", "throttle", "brake")), (1.3, 1.8))


def straggler_fail_slow(s: Story) -> None:
    _slow(s, "straggler", (1.7, 3.2))
