"""The stressor names stress-ng 0.15 knows (`stress-ng --stressors`).

Kept as data so a job file can be validated on a machine without stress-ng (simulation only);
the profiler and the worker still ask the installed stress-ng before running anything.
"""

KNOWN_STRESSORS = frozenset(
    """
    access af-alg affinity aio aiol apparmor alarm atomic bad-altstack bad-ioctl bigheap
    bind-mount binderfs branch brk bsearch cache cacheline cap chattr chdir chmod chown chroot
    clock clone close context copy-file cpu cpu-online crypt cyclic daemon dccp dekker dentry
    dev dev-shm dir dirdeep dirmany dnotify dup dynlib efivar enosys env epoll eventfd exec
    exit-group fallocate fanotify far-branch fault fcntl fiemap fifo file-ioctl filename flock
    flushcache fork forkheavy fp fp-error fpunch fsize fstat full funccall funcret futex get
    getdent getrandom goto gpu handle hash hdd heapsort hrtimers hsearch icache icmp-flood
    idle-page inode-flags inotify io iomix ioport ioprio io-uring ipsec-mb itimer jpeg judy kcmp
    key kill klog kvm l1cache landlock lease link list llc-affinity loadavg locka lockbus lockf
    lockofd longjmp loop lsearch madvise malloc matrix matrix-3d mcontend membarrier memcpy
    memfd memhotplug memrate memthrash mergesort mincore misaligned mknod mlock mlockmany mmap
    mmapaddr mmapfixed mmapfork mmaphuge mmapmany mprotect mq mremap msg msync msyncmany munmap
    mutex nanosleep netdev netlink-proc netlink-task nice nop null numa oom-pipe opcode open
    pagemove pageswap pci personality peterson physpage pidfd ping-sock pipe pipeherd pkey
    plugin poll prctl prefetch priv-instr procfs pthread ptrace pty qsort quota race-sched
    radixsort randlist ramfs rawdev rawpkt rawsock rawudp rdrand readahead reboot regs remap
    rename resched resources revio ring-pipe rlimit rmap rotate rseq rtc schedpolicy sctp seal
    seccomp secretmem seek sem sem-sysv sendfile session set shellsort shm shm-sysv sigabrt
    sigchld sigfd sigfpe sigio signal signest sigpending sigpipe sigq sigrt sigsegv sigsuspend
    sigtrap skiplist sleep smi sock sockabuse sockdiag sockfd sockpair sockmany softlockup spawn
    sparsematrix splice stack stackmmap str stream swap switch symlink sync-file syncload
    sysbadaddr syscall sysinfo sysinval sysfs tee timer timerfd tlb-shootdown tmpfs touch tree
    tsc tsearch tun udp udp-flood umount unshare uprobe urandom userfaultfd usersyscall utime
    vdso vecfp vecmath vecshuf vecwide verity vfork vforkmany vm vm-addr vm-rw vm-segv vm-splice
    wait waitcpu watchdog wcs x86cpuid x86syscall xattr yield zero zlib zombie
    """.split()
)
