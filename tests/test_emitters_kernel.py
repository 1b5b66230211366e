"""Issue 14, emitters: the Linux kernel (v4.15 to the newest tag) and the Lustre client. Every error, fatal and warning
wording of the kernel families a GPU node logs when a training job dies (the OOM killer and memcg, hung-task and lockup
watchdogs, panics and oopses, machine checks, EDAC and APEI/GHES, PCIe AER/DPC/hotplug, NVMe, the block layer, ext4,
XFS, NFS/SUNRPC, mlx5 health and port events, user-space segfaults and traps) and Lustre's console messages, printed
with the prefixes dmesg, dmesg -T, journald and syslog put before them, must land in the class its meaning gives;
benign context (a server "OK" again, a link back up, corrected-error chatter) is never a cause.

The lines are built here from the format strings of each release (the wording drifts: "Kill process" / "Killed
process", "Uncorrected" / "Uncorrectable", "error received" / "error message received from", "print_req_error:" /
"blk_update_request:" / bare "I/O error, dev"), so the patterns are checked against wording they were not written from.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crashcart.settings import Settings
from tests.kit import run_files, winner

HOST = "gpu-node-017"


def dmesg(message: str) -> str:
    """A kernel line as `dmesg` prints it: seconds since boot."""
    return f"[ 8812.104233] {message}"


def dmesg_t(message: str) -> str:
    """A kernel line as `dmesg -T` prints it: ctime."""
    return f"[Sat Nov 30 02:13:07 2024] {message}"


def journal(message: str) -> str:
    """A kernel line as journald/rsyslog write it (/var/log/messages, kern.log, journalctl)."""
    return f"Nov 30 02:13:07 {HOST} kernel: {message}"


def journal_iso(message: str) -> str:
    """journalctl -o short-iso, with the printk time kept by rsyslog's kernel input."""
    return f"2024-11-30T02:13:07.123456+00:00 {HOST} kernel: [ 8812.104233] {message}"


OOM = "host_oom_kill"
HANG = "rank_hang_or_missing_rank"
NODE = "slurm_node_failure"
PCIE = "pcie_aer_error"
STORE = "storage_full_or_io_error"
SHARED = "network_filesystem_hang"
NIC = "ib_port_error_link_flap"
NATIVE = "native_crash_segfault_abort"
UNKNOWN = "unknown"

VM = "total-vm:91234567kB, anon-rss:81234567kB, file-rss:123456kB, shmem-rss:0kB"

# group -> (class, messages); each message is printed with the prefixes in turn (dmesg, dmesg -T, journald,
# journalctl short-iso), so every family is checked under every wrapper.
GROUPS: dict[str, tuple[str, list[str]]] = {
    # mm/oom_kill.c + mm/memcontrol.c: the global and memcg OOM killer, 4.15 (separate "Kill process ... or
    # sacrifice child" and "Killed process" lines) through 5.1+ (one "<reason>: Killed process" line) and the
    # oom-kill:constraint= summary (4.19+), the reaper, the 4.15-4.18 memcg "Task in ... killed as a result of limit"
    "oom killer": (
        OOM,
        [
            "python invoked oom-killer: gfp_mask=0x14200ca(GFP_HIGHUSER_MOVABLE), nodemask=(null), order=0, oom_score_adj=0",
            "pt_main_thread invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0",
            "Out of memory: Kill process 884213 (python) score 912 or sacrifice child",
            "Memory cgroup out of memory: Kill process 884213 (python) score 912 or sacrifice child",
            "Killed process 884213 (python) total-vm:91234567kB, anon-rss:81234567kB, file-rss:123456kB, shmem-rss:0kB",
            "Out of memory: Killed process 884213 (python) total-vm:91234567kB, anon-rss:81234567kB, file-rss:123456kB, shmem-rss:0kB, UID:1000 pgtables:170000kB oom_score_adj:0",
            "Memory cgroup out of memory: Killed process 884213 (pt_main_thread) total-vm:91234567kB, anon-rss:81234567kB, file-rss:123456kB, shmem-rss:0kB, UID:1000 pgtables:170000kB oom_score_adj:0",
            "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,task_memcg=/user.slice/user-1000.slice/session-4.scope,task=python,pid=884213,uid=1000",
            "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0-1,oom_memcg=/slurm/uid_1000/job_123456,task_memcg=/slurm/uid_1000/job_123456/step_0/task_3,task=python,pid=884213,uid=1000",
            "oom_reaper: reaped process 884213 (python), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
            "oom_reaper: unable to reap pid:884213 (python)",
            "Task in /slurm/uid_1000/job_123456/step_0 killed as a result of limit of /slurm/uid_1000/job_123456",
            "Kernel panic - not syncing: Out of memory and no killable processes...",
            "Memory limit reached of cgroup /kubepods/burstable/pod1234",
            "Kernel panic - not syncing: Out of memory: system-wide panic_on_oom is enabled",
            "Kernel panic - not syncing: Out of memory: compulsory panic_on_oom is enabled",
            "Kernel panic - not syncing: System is deadlocked on memory",
        ],
    ),
    # kernel/hung_task.c, kernel/watchdog.c + watchdog_hld.c/watchdog_perf.c ("NMI watchdog: " before 4.13-ish,
    # "watchdog: " after), kernel/rcu/tree_stall.h ("rcu: " pr_fmt from 4.20)
    "hung tasks and lockups": (
        HANG,
        [
            "INFO: task python:884213 blocked for more than 120 seconds.",
            "INFO: task pt_main_thread:884213 blocked for more than 122 seconds.",
            "INFO: task python:884213 blocked in I/O wait for more than 122 seconds.",
            "INFO: task python:884213 is blocked on a mutex likely owned by task python:884200.",
            "watchdog: BUG: soft lockup - CPU#18 stuck for 27s! [python3:2254956]",
            "NMI watchdog: BUG: soft lockup - CPU#3 stuck for 22s! [pt_main_thread:41234]",
            "INFO: rcu_sched detected stalls on CPUs/tasks:",
            "INFO: rcu_sched self-detected stall on CPU",
            "rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:",
            "rcu: INFO: rcu_preempt self-detected stall on CPU",
            "rcu: INFO: rcu_preempt detected expedited stalls on CPUs/tasks: { 12-... } 21004 jiffies s: 1234 root: 0x1/.",
        ],
    ),
    # a hard lockup takes the whole node down (the panic follows)
    "hung tasks and lockups, node": (
        NODE,
        [
            "NMI watchdog: Watchdog detected hard LOCKUP on cpu 12",
            "watchdog: Watchdog detected hard LOCKUP on cpu 12",
        ],
    ),
    # kernel/panic.c: the panic line and its end marker, with the reasons the other families pass to panic()
    "panics": (
        NODE,
        [
            "Kernel panic - not syncing: hung_task: blocked tasks",
            "Kernel panic - not syncing: softlockup: hung tasks",
            "Kernel panic - not syncing: Hard LOCKUP",
            "Kernel panic - not syncing: Fatal exception",
            "Kernel panic - not syncing: Fatal exception in interrupt",
            "Kernel panic - not syncing: Fatal machine check",
            "Kernel panic - not syncing: Timeout: Not all CPUs entered broadcast exception handler",
            "Kernel panic - not syncing: GHES: Fatal hardware error!",
            "---[ end Kernel panic - not syncing: Fatal exception ]---",
        ],
    ),
    # arch/x86/mm/fault.c, lib/bug.c, arch/x86/kernel/dumpstack.c: kernel oopses; whether the node survives is not
    # in the line, so the cause stays undecided
    "oopses": (
        UNKNOWN,
        [
            "BUG: unable to handle kernel NULL pointer dereference at 0000000000000008",
            "BUG: unable to handle kernel paging request at ffffc90000abc000",
            "BUG: kernel NULL pointer dereference, address: 0000000000000008",
            "BUG: unable to handle page fault for address: ffffc90000abc000",
            "general protection fault: 0000 [#1] SMP PTI",
            "general protection fault, probably for non-canonical address 0xdead000000000100: 0000 [#1] SMP NOPTI",
            "Oops: general protection fault, probably for non-canonical address 0xdead000000000100: 0000 [#1] PREEMPT SMP NOPTI",
            "kernel BUG at mm/slub.c:305!",
            "Oops: 0000 [#1] SMP PTI",
        ],
    ),
    # arch/x86/kernel/cpu/mce/core.c (mcheck/ before 5.0), mm/memory-failure.c, drivers/edac/edac_mc.c,
    # drivers/acpi/apei/ghes.c + drivers/firmware/efi/cper.c: host hardware errors no TAXONOMY class owns
    "machine checks": (
        UNKNOWN,
        [
            "mce: [Hardware Error]: CPU 12: Machine Check Exception: 5 Bank 4: be00000000800400",
            "mce: [Hardware Error]: CPU 12: Machine Check: 0 Bank 5: be00000000800400",
            "mce: [Hardware Error]: Machine check: Processor context corrupt",
            "mce: Uncorrected hardware memory error in user-access at 2f8d39a000",
            "Memory failure: 0x2f8d39a: Sending SIGBUS to python:884213 due to hardware memory corruption",
            "Memory failure: 0x2f8d39a: Killing python:884213 due to hardware memory corruption",
            "EDAC MC1: 1 UE memory read error on CPU_SrcID#1_MC#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x12345 offset:0x0 grain:32)",
            "{1}[Hardware Error]: event severity: fatal",
            "{2}[Hardware Error]: event severity: recoverable",
        ],
    ),
    # drivers/pci/pcie/aer.c (aerdrv_errprint.c before 4.19): severities "Uncorrected"/"Corrected" until 6.x, then
    # "Uncorrectable"/"Correctable"; "error received: id=%04x" (4.15-4.18), "error received: <bdf>" (4.19-6.x),
    # "error message received from <bdf>" (newest); drivers/pci/pcie/err.c recovery outcome; dpc.c
    "pcie aer": (
        PCIE,
        [
            "pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: id=0008",
            "pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:01:00.0",
            "pcieport 0000:00:01.0: AER: Uncorrectable (Fatal) error received: 0000:01:00.0",
            "pcieport 0000:00:1c.0: AER: Multiple Uncorrectable (Non-Fatal) error message received from 0000:73:00.1",
            "pcieport 0000:00:1c.0: AER: Uncorrectable (Fatal) error message received from 0000:01:00.0",
            "pcieport 0000:00:01.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, id=0008(Requester ID)",
            "nvidia 0000:0f:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, (Requester ID)",
            "nvidia 0000:0f:00.0: PCIe Bus Error: severity=Uncorrectable (Fatal), type=Data Link Layer, (Receiver ID)",
            "pcieport 0000:00:01.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Inaccessible, (Unregistered Agent ID)",
            "pcieport 0000:00:01.0:   device [8086:1901] error status/mask=00004000/00000000",
            "pcieport 0000:00:01.0:    [14] CmpltTO                (First)",
            "pcieport 0000:00:01.0:    [ 5] SDES                   (First)",
            "pcieport 0000:00:01.0:    [ 5] Surprise Down Error    (First)",
            "pcieport 0000:00:01.0:    [14] Completion Timeout     (First)",
            "nvidia 0000:3b:00.0: AER: can't recover (no error_detected callback)",
            "pcieport 0000:3a:00.0: AER: device recovery failed",
            "pcieport 0000:00:03.0: DPC: containment event, status:0x1f01 source:0x0000",
            "pcieport 0000:00:03.0: DPC: containment event, status:0x1f01: unmasked uncorrectable error detected",
            "pcieport 0000:00:1b.0: DPC: unmasked uncorrectable error detected",
            "nvidia 0000:3b:00.0: aer_uncor_severity: 0x00062010",
            "pcieport 0000:17:01.0: AER: Corrected error received: id=3d00",
            "pcieport 0000:17:01.0: AER: Corrected error received: 0000:3d:00.0",
            "pcieport 0000:17:01.0: AER: Correctable error received: 0000:3d:00.0",
            "pcieport 0000:17:01.0: AER: Correctable error message received from 0000:3d:00.0",
            "pcieport 0000:00:03.0: AER: Multiple Corrected error received: 0000:00:03.0",
            "pcieport 0000:00:03.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
            "nvidia 0000:3d:00.0: PCIe Bus Error: severity=Correctable, type=Data Link Layer, (Transmitter ID)",
        ],
    ),
    # drivers/pci/hotplug/pciehp_ctrl.c ("pciehp 0000:b0:02.0:pcie004:" device name to 4.18, "pcieport ...: pciehp:"
    # after), drivers/pci/pci.c (power state, link training and readiness waits after reset)
    "pcie link": (
        PCIE,
        [
            "pciehp 0000:b0:02.0:pcie004: Slot(3): Link Down",
            "pcieport 0000:b0:02.0: pciehp: Slot(3): Link Down",
            "pcieport 0000:b0:02.0: pciehp: Slot(3): Card not present",
            "pcieport 0000:00:1c.0: Link Down",
            "nvidia 0000:3b:00.0: Unable to change power state from D3cold to D0, device inaccessible",
            "nvidia 0000:3b:00.0: Refused to change power state, currently in D3",
            "pcieport 0000:3a:00.0: Data Link Layer Link Active not set in 1000 msec",
            "nvidia 0000:3b:00.0: not ready 65535ms after FLR; giving up",
            "pci 0000:04:00.0: 252.048 Gb/s available PCIe bandwidth, limited by 16.0 GT/s PCIe x16 link at 0000:01:00.0 (capable of 504.112 Gb/s with 32.0 GT/s PCIe x16 link)",
        ],
    ),
    # drivers/nvme/host/pci.c + core.c: timeouts (4.15 "I/O %d QID %d timeout, ...", 6.x "I/O tag %d (%04x) opcode
    # ... QID %d timeout, ..."), dead controller, probe failure, nvme_log_error (5.18+)
    "nvme": (
        STORE,
        [
            "nvme nvme0: I/O 123 QID 4 timeout, aborting",
            "nvme nvme0: I/O 123 QID 4 timeout, reset controller",
            "nvme nvme0: I/O 0 QID 0 timeout, disable controller",
            "nvme nvme4: I/O tag 22 (2016) opcode 0x2 (Admin Cmd) QID 0 timeout, reset controller",
            "nvme nvme1: I/O tag 512 (1200) opcode 0x1 (I/O Cmd) QID 8 timeout, aborting req_op:WRITE(1) size:131072",
            "nvme nvme0: controller is down; will reset: CSTS=0xffffffff, PCI_STATUS=0xffff",
            "nvme nvme0: Removing after probe failure status: -19",
            "nvme nvme0: Device not ready; aborting reset, CSTS=0x1",
            "nvme nvme4: Disabling device after reset failure: -19",
            "nvme nvme0: frozen state error detected, reset controller",
            "nvme0n1: Read(0x2) @ LBA 123456, 8 blocks, Unrecovered Read Error (sct 0x2 / sc 0x81) DNR",
            "nvme0n1: Write(0x1) @ LBA 123456, 256 blocks, Write Fault (sct 0x2 / sc 0x80) MORE DNR",
            "block nvme0n1: no available path - failing I/O",
        ],
    ),
    # block/blk-core.c (print_req_error 4.15-4.18, blk_update_request 4.19-5.15, no prefix 5.16+; blk_errors
    # names), fs/buffer.c
    "block layer": (
        STORE,
        [
            "print_req_error: I/O error, dev nvme0n1, sector 123456",
            "blk_update_request: I/O error, dev sda, sector 123456 op 0x1:(WRITE) flags 0x800 phys_seg 1 prio class 0",
            "I/O error, dev sdb, sector 3909372392 op 0x1:(WRITE) flags 0x9800 phys_seg 1 prio class 2",
            "blk_update_request: critical medium error, dev sda, sector 8",
            "critical target error, dev sdc, sector 1234 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 0",
            "print_req_error: critical space allocation error, dev dm-3, sector 100",
            "timeout error, dev sda, sector 1234 op 0x1:(WRITE) flags 0x0 phys_seg 1 prio class 0",
            "Buffer I/O error on dev dm-0, logical block 1308098575, lost async page write",
            "Buffer I/O error on dev sda1, logical block 0, async page read",
        ],
    ),
    # fs/ext4/super.c, inode.c, page-io.c; fs/jbd2/journal.c, checkpoint.c
    "ext4": (
        STORE,
        [
            "EXT4-fs error (device nvme0n1p1): ext4_find_entry:1455: inode #2: comm python: reading directory lblock 0",
            "EXT4-fs error (device md0): ext4_journal_check_start:83: comm python: Detected aborted journal",
            "EXT4-fs (md0): Remounting filesystem read-only",
            "EXT4-fs (sda1): I/O error while writing superblock",
            "EXT4-fs (sda1): previous I/O error to superblock detected",
            "EXT4-fs (dm-0): Delayed block allocation failed for inode 1234 at logical offset 5678 with max blocks 2048 with error 28",
            "EXT4-fs (dm-0): This should not happen!! Data will be lost",
            "EXT4-fs (nvme0n1p1): failed to convert unwritten extents to written extents -- potential data loss!  (inode 12, error -30)",
            "Aborting journal on device sda1-8.",
            "JBD2: Detected IO errors while flushing file data on sda1-8",
        ],
    ),
    # fs/xfs/xfs_fsops.c xfs_do_force_shutdown (4.15-5.x wording, then "<what> (0x%x) detected at %pS (%s:%d).
    # Shutting down filesystem."), xfs_buf.c, xfs_error.c, xfs_log.c
    "xfs": (
        STORE,
        [
            "XFS (dm-1): xfs_do_force_shutdown(0x8) called from line 985 of file fs/xfs/xfs_trans.c.  Return address = 0xffffffffc0d5335f",
            "XFS (dm-1): Corruption of in-memory data detected.  Shutting down filesystem",
            "XFS (dm-0): Log I/O Error Detected. Shutting down filesystem",
            "XFS (sdb1): I/O Error Detected. Shutting down filesystem",
            "XFS (sdb1): Log I/O Error (0x2) detected at xlog_ioend_work+0x6e/0x70 [xfs] (fs/xfs/xfs_log.c:1378).  Shutting down filesystem.",
            "XFS (sdb1): Metadata I/O Error (0x1) detected at xfs_trans_read_buf_map+0x1a/0x2c0 [xfs] (fs/xfs/xfs_trans_buf.c:296).  Shutting down filesystem.",
            "XFS (sdb1): Corruption of in-memory data (0x8) detected at xfs_trans_cancel+0x1a/0x2c0 [xfs] (fs/xfs/xfs_trans.c:1097).  Shutting down filesystem.",
            "XFS (sdb1): Please unmount the filesystem and rectify the problem(s)",
            "XFS (sdb1): Please umount the filesystem and rectify the problem(s)",
            "XFS (sdb1): log I/O error -5",
            "XFS (sdb1): xfs_log_force: error -5 returned.",
            "XFS (sda1): Metadata corruption detected at xfs_dinode_verify+0x1a/0x2c0 [xfs], inode 0x1234 dinode",
            "XFS (sda1): Metadata CRC error detected at xfs_agf_read_verify+0x1a/0x2c0 [xfs], xfs_agf block 0x1",
            'XFS (sda1): metadata I/O error in "xfs_buf_ioend+0x1c0/0x4d0 [xfs]" at daddr 0x2 len 1 error 5',
            'XFS (sda1): metadata I/O error: block 0x2 ("xfs_trans_read_buf_map") error 5 numblks 1',
        ],
    ),
    # net/sunrpc/clnt.c call_timeout/call_decode ("%s: server %s not responding, still trying|timed out", program
    # name nfs or lockd), fs/nfs/nfs4state.c
    "nfs": (
        SHARED,
        [
            "nfs: server nas01 not responding, still trying",
            "nfs: server 10.0.0.5 not responding, timed out",
            "lockd: server nas01 not responding, still trying",
            "NFS: nfs4_reclaim_open_state: Lock reclaim failed!",
            "NFS: state manager: check lease failed on NFSv4 server nas01 with error 13",
        ],
    ),
    # lustre-release lustre/ptlrpc/import.c, client.c, ldlm (2.10-2.17): console messages of the client
    "lustre": (
        SHARED,
        [
            "Lustre: fs-OST0035-osc-ffff8b2c7a3c4800: Connection to fs-OST0035 (at 10.10.33.50@o2ib2) was lost; in progress operations using this service will wait for recovery to complete",
            "LustreError: 166-1: MGC10.10.0.1@o2ib: Connection to MGS (at 10.10.0.1@o2ib) was lost; in progress operations using this service will fail",
            "LustreError: 167-0: fs-OST0003-osc-ffff9a4c1e2f3000: This client was evicted by fs-OST0003; in progress operations using this service will fail.",
            "Lustre: Evicted from fs-OST0003_UUID (at 10.10.33.50@o2ib2) after server handle changed from 0x1b2c3d4e to 0x5f6a7b8c",
            "Lustre: 42858:0:(client.c:2134:ptlrpc_expire_one_request()) @@@ Request sent has timed out for slow reply: [sent 1562307384/real 1562307384]  req@ffff8b2c7a3c4800 x1638012345678/t0(0) o400->fs-OST0035-osc@10.10.33.50@o2ib2:28/4 lens 224/224 e 0 to 1 dl 1562307391 ref 1 fl Rpc:X/0/ffffffff rc 0/-1",
            "Lustre: 42858:0:(client.c:2134:ptlrpc_expire_one_request()) @@@ Request sent has timed out for sent delay: [sent 1562307384/real 0]  req@ffff8b2c7a3c4800",
            "Lustre: 42858:0:(client.c:2134:ptlrpc_expire_one_request()) @@@ Request sent has failed due to network error: [sent 1562307384/real 1562307384]  req@ffff8b2c7a3c4800",
            "LustreError: 11-0: fs-MDT0000-mdc-ffff88203810d800: operation mds_reint to node 10.10.0.2@o2ib failed: rc = -107",
            "LNetError: 2431:0:(o2iblnd_cb.c:3174:kiblnd_check_conns()) Timed out tx for 172.31.126.87@o2ib: 403055 seconds",
        ],
    ),
    # ENOSPC (-28) / EDQUOT (-122) answered by a target: the shared store is full, not hung
    "lustre, store": (
        STORE,
        [
            "LustreError: 11-0: fs-OST0003-osc-ffff9a4c1e2f3000: operation ost_write to node 10.10.33.50@o2ib2 failed: rc = -28",
            "LustreError: 40123:0:(osc_request.c:1790:osc_brw_fini_request()) fs-OST0003-osc-ffff9a4c: rc = -122",
        ],
    ),
    # drivers/net/ethernet/mellanox/mlx5/core/health.c, events.c, en_main.c (4.15-6.x)
    "mlx5": (
        NIC,
        [
            "mlx5_core 0000:81:00.0: poll_health:801:(pid 0): device's health compromised - reached miss count",
            "mlx5_core 0000:81:00.0: poll_health:739:(pid 0): Fatal error 1 detected",
            "mlx5_core 0000:81:00.0: mlx5_health_try_recover:334:(pid 1234): health recovery flow aborted, PCI reads still not working",
            "mlx5_core 0000:81:00.0: print_health_info:432:(pid 0): Health issue observed, firmware internal error, severity(3) ERROR:",
            "mlx5_core 0000:5c:00.0: mlx5_port_module_event:1131:(pid 0): Port module event[error]: module 0, Cable error, High Temperature",
            "mlx5_core 0000:5c:00.0: Port module event[error]: module 1, Cable error, Bus stuck (I2C or data shorted)",
            "mlx5_core 0000:01:00.0: Port module event: module 0, Cable unplugged",
            "mlx5_core 0000:01:00.0 enp1s0f0: Link down",
        ],
    ),
    # mlx5 events.c reports the slot's power budget: a PCIe-side fault
    "mlx5, pcie": (
        PCIE,
        [
            "mlx5_core 0000:5c:00.0: mlx5_pcie_event:299:(pid 268269): Detected insufficient power on the PCIe slot (27W).",
        ],
    ),
    # arch/x86/mm/fault.c show_signal_msg (6.x adds "likely on CPU ..." and "[<off>,<start>+<size>]"),
    # arch/x86/kernel/traps.c ("general protection ip:" to 5.x, "general protection fault ip:" after)
    "user crashes": (
        NATIVE,
        [
            "pt_main_thread[2536443]: segfault at 7f797fe00000 ip 00007f7c7ac69996 sp 00007f7c12fd7c30 error 4 in libnccl.so.2[7f7c7ac00000+d3d3000]",
            "python[88412]: segfault at 0 ip 00007f12aa001234 sp 00007ffd1c2b3a40 error 6 in libc.so.6[7f12a9e00000+195000]",
            "python[88412]: segfault at 0 ip 00007f12aa001234 sp 00007ffd1c2b3a40 error 6 in libc.so.6[28000,7f12a9e00000+195000] likely on CPU 17 (core 9, socket 0)",
            "traps: python3[41234] general protection fault ip:7f0e3a1b2c3d sp:7ffc1e2f3a40 error:0 in libtorch_cuda.so[7f0e10000000+5a000000]",
            "traps: python3[41234] general protection ip:7f0e3a1b2c3d sp:7ffc1e2f3a40 error:0 in libtorch_cuda.so[7f0e10000000+5a000000]",
            "python3[41234] general protection ip:7f0e3a1b2c3d sp:7ffc1e2f3a40 error:0 in libc-2.27.so[7f0e10000000+1e7000]",
            "traps: python[1234] trap invalid opcode ip:7f0e3a1b2c3d sp:7ffc1e2f3a40 error:0 in libfoo.so[7f0e10000000+5000]",
            "traps: python[1234] trap divide error ip:7f0e3a1b2c3d sp:7ffc1e2f3a40 error:0 in libfoo.so[7f0e10000000+5000]",
        ],
    ),
}

WRAPPERS = (dmesg, dmesg_t, journal, journal_iso)
CASES = [
    (group, WRAPPERS[i % len(WRAPPERS)](message), cls)
    for group, (cls, messages) in GROUPS.items()
    for i, message in enumerate(messages)
]


@pytest.mark.parametrize(("group", "text", "cls"), CASES, ids=[f"{g}-{i}" for i, (g, _, _) in enumerate(CASES)])
def test_each_wording_gets_the_class_it_means(group: str, text: str, cls: str) -> None:
    got = winner(text)
    assert got is not None, text
    assert got[1] == cls, (group, text, got)
    if cls == UNKNOWN:  # a signature of its own, not the catch-all that reads "error" anywhere
        assert not got[0].startswith("generic."), (group, text, got)


# Context and recovery chatter: never a cause on its own.
BENIGN = [
    journal("nfs: server nas01 OK"),
    dmesg("lockd: server nas01 OK"),
    dmesg("Lustre: fs-OST0003-osc-ffff9a4c1e2f3000: Connection restored to fs-OST0003_UUID (at 10.10.33.50@o2ib2)"),
    dmesg("mlx5_core 0000:01:00.0 enp1s0f0: Link up"),
    dmesg("mlx5_core 0000:01:00.0: Port module event: module 0, Cable plugged"),
    dmesg("pcieport 0000:b0:02.0: pciehp: Slot(3): Link Up"),
    dmesg("pcieport 0000:3a:00.0: AER: Device recovery successful"),
    dmesg("pcieport 0000:3a:00.0: AER: Root Port link has been reset (0)"),
    dmesg("pcieport 0000:3a:00.0: AER:   Error of this Agent is reported first"),
    dmesg("pcieport 0000:3a:00.0:   TLP Header: 40000001 0000000f 90028090 01000000"),
    dmesg("mce: [Hardware Error]: Machine check events logged"),
    dmesg("mce: CMCI storm detected: switching to poll mode"),
    dmesg("{1}[Hardware Error]: It has been corrected by h/w and requires no further action"),
    dmesg("{1}[Hardware Error]: event severity: corrected"),
    dmesg(
        "EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x12345 offset:0x0 "
        "grain:32 syndrome:0x0)"
    ),
    dmesg('"echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.'),
    dmesg("      Tainted: P           OE     5.15.0-1053-nvidia #54-Ubuntu"),
    dmesg("Tasks state (memory values in pages):"),
    dmesg("memory: usage 8388608kB, limit 8388608kB, failcnt 1234"),
    dmesg("Mem-Info:"),
    dmesg("EXT4-fs (sda1): error count since last fsck: 5"),
    dmesg("EXT4-fs (nvme0n1p1): mounted filesystem with ordered data mode. Opts: (null)"),
    dmesg("XFS (sda1): Ending clean mount"),
    dmesg("nvme nvme0: I/O 5 QID 2 timeout, completion polled"),
    dmesg("nvme nvme0: Shutdown timeout set to 10 seconds"),
    dmesg("WARNING: CPU: 3 PID: 1234 at kernel/workqueue.c:3047 __flush_work+0x3a1/0x3b0"),
    dmesg(
        "Kernel Offset: 0x2a000000 from 0xffffffff81000000 (relocation range: 0xffffffff80000000-0xffffffffbfffffff)"
    ),
]


@pytest.mark.parametrize("text", BENIGN)
def test_context_is_never_a_cause(text: str) -> None:
    got = winner(text)
    assert got is None or got == ("generic.error", "unknown"), (text, got)  # the catch-all ranks below any cause


def test_an_oom_kill_names_the_killed_program(tmp_path: Path, settings: Settings) -> None:
    log = "\n".join(
        [
            dmesg(
                "python invoked oom-killer: gfp_mask=0x14200ca(GFP_HIGHUSER_MOVABLE), nodemask=(null), order=0, oom_score_adj=0"
            ),
            dmesg("Memory cgroup out of memory: Kill process 884213 (python) score 912 or sacrifice child"),
            dmesg(f"Killed process 884213 (python) {VM}"),
        ]
    )
    root = run_files(tmp_path / "b", {"dmesg.log": log + "\n"}, settings).document.root_cause
    assert root.class_ == OOM
    assert any("884213" in c.text for c in root.citations)
