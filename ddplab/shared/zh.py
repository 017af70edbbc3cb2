"""The catalogue: every message, label and note of ddplab in Chinese, keyed by its English text
(words.say). One term per concept: rank stays "rank", process group 进程组, collective 集合通信,
engine 引擎, pool 进程池, cell 单元格, step 步, straggler 慢节点. A key "context|text" is the English
text for one context of several (the dashboard's "running" is not the elapsed time's)."""

ZH: dict[str, str] = {
    # --- dashboard/classview.py (the teacher's view)
    "Class {dir}": "班级 {dir}",
    "{n} learners": "{n} 名学员",
    "skipped: {what}": "已跳过：{what}",
    "updated every {s:g} s": "每 {s:g} 秒更新",
    "lesson": "课",
    "started": "已开始",
    "finished": "已完成",
    "exercise": "练习",
    "tried": "尝试",
    "class view|right": "答对",
    "commonest wrong answers": "最常见的错误答案",
    "prediction": "预测",
    "predicted": "预测值",
    "measured (median)": "测量值（中位数）",
    "no prediction": "没有预测",
    "nothing recorded yet: learners appear here as they predict and check answers": "还没有记录：学员做出预测、检查答案后会出现在这里",
    "no pool is running": "没有正在运行的进程池",
    "no pool is running; start one with %ddp_start": "没有正在运行的进程池；用 %ddp_start 启动一个",
    # --- magics.py
    "a pool of {n} ranks is already running; nothing changed. Use %ddp_restart for a fresh pool, or %ddp_stop then %ddp_start N.":
        "已有一个 {n} 个 rank 的进程池在运行，什么也没有改变。要一个新的进程池用 %ddp_restart，或者先 %ddp_stop 再 %ddp_start N。",
    "; run code on every rank with %%ddp":
        "；用 %%ddp 在每个 rank 上运行代码",
    "running in the background on {n} ranks; %ddp_wait shows its output, %ddp_interrupt stops it":
        "在后台的 {n} 个 rank 上运行；%ddp_wait 显示它的输出，%ddp_interrupt 停止它",
    "this front end draws nothing the kernel sends from a thread (Colab): the dashboard of a cell in the background is drawn while %ddp_wait waits for it":
        "这个前端不绘制内核从线程发来的任何内容（Colab）：后台单元格的仪表盘会在 %ddp_wait 等待它时绘制",
    "this cell failed as it was meant to ({name}):":
        "这个单元格如预期那样失败了（{name}）：",
    "the cell was meant to fail with {name}, but it did not":
        "这个单元格本应以 {name} 失败，但它没有失败",
    "every rank was sent SIGINT; %ddp_wait shows how the cell ended":
        "已向每个 rank 发送 SIGINT；%ddp_wait 显示这个单元格是怎样结束的",
    "every rank was sent SIGINT":
        "已向每个 rank 发送 SIGINT",
    "{n} ranks, backend gloo, rendezvous {where}, collective timeout {timeout:g} s, started in {seconds:.1f} s":
        "{n} 个 rank，后端 gloo，rendezvous {where}，集合通信超时 {timeout:g} 秒，启动用时 {seconds:.1f} 秒",
    "who else can reach it:":
        "别人能否连到它：",
    "wrote {n} points to {path} (columns: {columns})":
        "已把 {n} 个数据点写入 {path}（列：{columns}）",
    "no fault drills set":
        "没有设置故障演练",
    "every fault drill cleared":
        "所有故障演练都已清除",
    "pdb on rank {rank}: {header}":
        "在 rank {rank} 上运行 pdb：{header}",
    "no nn.Module on the ranks to compare":
        "rank 上没有可以比较的 nn.Module",
    "{ranks} differ{s} from rank 0: the ranks' parameters drifted apart (not wrapped in DDP? a step taken on some ranks only?)":
        "{ranks} 与 rank 0 不同：各 rank 的参数已经不一致（没有用 DDP 包装？有一步只在部分 rank 上执行了？）",
    "identical on every rank":
        "每个 rank 上都相同",
    "wrote {n} {cells} to {path}; run it with {run}":
        "已把 {n} 个单元格写入 {path}；这样运行它：{run}",
    "stopped {n} rank{s} in {seconds:.1f} s":
        "已停止 {n} 个 rank，用时 {seconds:.1f} 秒",
    "left the group and shut down its {n} {engines} and their controller in {seconds:.1f} s":
        "已离开进程组，并关闭了它的 {n} 个引擎及其控制器，用时 {seconds:.1f} 秒",
    "left the group in {seconds:.1f} s; the {n} {engines} (started elsewhere, on {hosts}) keep running: %ddp_start --connect groups them again, %ddp_stop --shutdown stops them":
        "已离开进程组，用时 {seconds:.1f} 秒；这 {n} 个引擎（在别处启动，位于 {hosts}）仍在运行：%ddp_start --connect 会把它们重新组成进程组，%ddp_stop --shutdown 会停止它们",
    # --- errors.py: a failed cell's report
    "the cell ran longer than {timeout:g} s on {ranks}; every rank was interrupted (SIGINT)":
        "单元格在 {ranks} 上运行超过了 {timeout:g} 秒；每个 rank 都已被中断（SIGINT）",
    "rank {rank} lost at step {step} ({where}): {why}":
        "rank {rank} 在第 {step} 步丢失（{where}）：{why}",
    "rank {rank} lost ({where}): {why}":
        "rank {rank} 已丢失（{where}）：{why}",
    "rank {rank} failed at step {step} ({where})":
        "rank {rank} 在第 {step} 步出错（{where}）",
    "rank {rank} failed ({where})":
        "rank {rank} 出错（{where}）",
    "{ranks} failed the same way":
        "{ranks} 以同样的方式出错",
    "a failed rank":
        "一个出错的 rank",
    "{ranks} stopped: their collective was cut off by {cause}":
        "{ranks} 已停止：它们的集合通信被 {cause} 中断了",
    "{ranks} stopped: its collective was cut off by {cause}":
        "{ranks} 已停止：它的集合通信被 {cause} 中断了",
    "ranks {ranks}":
        "rank {ranks}",
    "rank {ranks}":
        "rank {ranks}",
    "list separator|, ":
        "、",
    "the pool was stopped":
        "进程池已停止",
    "its engine stopped answering":
        "它的引擎不再应答",
    "its engine is gone: the controller no longer hears it":
        "它的引擎已经不在了：控制器再也收不到它的消息",
    "its engine is gone: the controller no longer hears it (the engine died, or its host)":
        "它的引擎已经不在了：控制器再也收不到它的消息（引擎或它所在的主机已经停止）",
    "its engine was killed (SIGKILL) by %ddp_fault kill":
        "它的引擎被 %ddp_fault kill 终止了（SIGKILL）",
    "its engine did not answer after SIGINT and SIGKILL":
        "发送 SIGINT 和 SIGKILL 之后，它的引擎仍没有应答",
    # --- cell.py: what was done after a failed cell
    "{killed} did not stop within {escalate:g} s of SIGINT and {was} restarted in {seconds:.1f} s (the variables of {killed} are gone; {kept} kept theirs); group re-formed":
        "{killed} 在 SIGINT 之后 {escalate:g} 秒内没有停下，已重启，用时 {seconds:.1f} 秒（{killed} 的变量已丢失；{kept} 保留了各自的变量）；进程组已重新组建",
    "{killed} did not stop within {escalate:g} s of SIGINT and {was} restarted in {seconds:.1f} s (the variables of {killed} are gone); group re-formed":
        "{killed} 在 SIGINT 之后 {escalate:g} 秒内没有停下，已重启，用时 {seconds:.1f} 秒（{killed} 的变量已丢失）；进程组已重新组建",
    "{lost} lost: run %ddp_restart (Lab.restart()) to bring back a full group ({lost} {start} fresh; {kept} keep their variables)":
        "{lost} 已丢失：运行 %ddp_restart（Lab.restart()）可以恢复完整的进程组（{lost} 将从头开始；{kept} 保留各自的变量）",
    "{lost} lost: run %ddp_restart (Lab.restart()) to bring back a full group ({lost} {start} fresh; {kept} keeps its variables)":
        "{lost} 已丢失：运行 %ddp_restart（Lab.restart()）可以恢复完整的进程组（{lost} 将从头开始；{kept} 保留自己的变量）",
    "{lost} lost: run %ddp_restart (Lab.restart()) to bring back a full group ({lost} {start} fresh)":
        "{lost} 已丢失：运行 %ddp_restart（Lab.restart()）可以恢复完整的进程组（{lost} 将从头开始）",
    "TensorFlow aborted its collectives on {ranks} and cannot run them again in these processes: %ddp_restart --all gives fresh ranks; then call ddplab.tf_config() and make the strategy again":
        "TensorFlow 中止了 {ranks} 上的集合通信，在这些进程中不能再运行它们：%ddp_restart --all 会给出全新的 rank；然后调用 ddplab.tf_config() 并重新创建 strategy",
    # --- frameworks.py (in a rank)
    "TensorFlow's gRPC server listens on every interface of this machine":
        "TensorFlow 的 gRPC 服务器在这台机器的每个网络接口上监听",
    "JAX's coordinator and gloo listen on this machine's addresses":
        "JAX 的协调服务和 gloo 在这台机器的地址上监听",
    "turned off (DDPLab.accept_gate = False)":
        "已关闭（DDPLab.accept_gate = False）",
    "{listens} with no authentication, and these ranks share the machine's network without the accept gate ({why}): any account could connect. Turn the gate on (%config DDPLab.accept_gate = True, then %ddp_restart), or give the pool a network of its own (%ddp_status says what an administrator can change)":
        "{listens}，不做任何认证；而这些 rank 共用这台机器的网络，又没有接入闸门（{why}）：任何账户都能连上来。请打开闸门（%config DDPLab.accept_gate = True，然后 %ddp_restart），或者给进程池一个自己的网络（%ddp_status 会说明管理员可以改哪项设置）",
    "TensorFlow already ran an op in this rank, and MultiWorkerMirroredStrategy must be made before any (\"Collective ops must be configured at program startup\"): %ddp_restart --all gives fresh ranks; then call ddplab.tf_config() and make the strategy first":
        "TensorFlow 已经在这个 rank 中运行过操作，而 MultiWorkerMirroredStrategy 必须在任何操作之前创建（\"Collective ops must be configured at program startup\"）：%ddp_restart --all 会给出全新的 rank；然后先调用 ddplab.tf_config() 并创建 strategy",
    "JAX already ran a computation in this rank, and jax.distributed must start before any: %ddp_restart --all gives fresh ranks; then call ddplab.jax_distributed() first":
        "JAX 已经在这个 rank 中做过计算，而 jax.distributed 必须在任何计算之前启动：%ddp_restart --all 会给出全新的 rank；然后先调用 ddplab.jax_distributed()",
    "JAX's distributed runtime was started here as process {index} of {count}, and it starts once per process: %ddp_restart --all gives fresh ranks":
        "JAX 的分布式运行时已经在这里以 {count} 个进程中的第 {index} 个启动过，而它在每个进程中只能启动一次：%ddp_restart --all 会给出全新的 rank",
    "group re-formed in {ms:.0f} ms; variables kept":
        "进程组已重新组建，用时 {ms:.0f} 毫秒；变量都保留着",
    "{name} (a process group): create it again":
        "{name}（一个进程组）：请重新创建",
    "these were tied to the old group: {fixes}":
        "这些对象绑定在旧的进程组上：{fixes}",
    # --- lab.py, drills.py, report.py, pools
    "restarted {lost} in {seconds:.1f} s ({its} variables are gone; {kept} kept theirs); group re-formed":
        "已重启 {lost}，用时 {seconds:.1f} 秒（{its}的变量已丢失；{kept} 保留了各自的变量）；进程组已重新组建",
    "its":
        "它",
    "their":
        "它们",
    "restarted: {ready}; every rank's variables were cleared, the engines kept":
        "已重启：{ready}；每个 rank 的变量都已清空，引擎保留",
    "restarted: {ready}; variables from before are gone":
        "已重启：{ready}；之前的变量都已丢失",
    "rank {rank} killed (SIGKILL); %ddp_restart brings it back":
        "rank {rank} 已被终止（SIGKILL）；%ddp_restart 可以让它回来",
    "rank {rank}: no fault drill":
        "rank {rank}：没有故障演练",
    "rank {rank} is a straggler: each step takes {factor:g}x as long (until %ddp_fault clear {rank})":
        "rank {rank} 成了慢节点：每一步的耗时变为原来的 {factor:g} 倍（直到 %ddp_fault clear {rank}）",
    "at step {step}":
        "在第 {step} 步",
    "at its next step":
        "在下一步",
    "rank {rank} will {what} {when} (ddplab.log counts steps)":
        "rank {rank} 将{when}{what}（步数由 ddplab.log 计数）",
    "be killed (SIGKILL)":
        "被终止（SIGKILL）",
    "raise":
        "抛出异常",
    ", on {n} hosts":
        "，分布在 {n} 台主机上",
    "{n} rank{s} ready in {seconds:.1f} s (gloo, {threads} {thread_s} per rank{where})":
        "{n} 个 rank 已就绪，用时 {seconds:.1f} 秒（gloo，每个 rank {threads} 个线程{where}）",
    "this machine has {n} other account(s); this kernel's channel: ":
        "本机还有 {n} 个其他账户；这个内核的通道：",
    "gloo listens on this machine's loopback ({why}), where its {n} other account(s) can connect: every connection of a group is checked to be yours before the group is used, and another account's is refused":
        "gloo 在本机的回环接口上监听（{why}），本机其他 {n} 个账户可以连接它：每个进程组在使用之前，都会检查它的每个连接是否属于你，其他账户的连接会被拒绝",
    "{n} connection(s) without the pool's key refused by the telemetry socket":
        "遥测套接字拒绝了 {n} 个没有进程池密钥的连接",
    "gloo ran out of file descriptors taking connections (another account flooded its port)":
        "gloo 在接受连接时用尽了文件描述符（另一个账户向它的端口发起了大量连接）",
    "{ranks} have not said they took it yet (they get it when they join the group again)":
        "{ranks} 还没有确认收到（它们重新加入进程组时会收到）",
    "{ranks} died: {why}; restarted in {seconds:.1f} s (their variables are gone), the group formed again":
        "{ranks} 已终止：{why}；已在 {seconds:.1f} 秒内重新启动（它们的变量已丢失），进程组已重新组建",
    "; for a private network ({cause}), an administrator can run: {fix}":
        "；要得到私有网络（{cause}），管理员可以运行：{fix}",
    "the account {account} connected to the ranks' gloo ports {n} time(s) ({taken} took a rank's connection while a group formed): each refused before any data moved, the group formed without it":
        "账户 {account} {n} 次连接了各 rank 的 gloo 端口（其中 {taken} 次在进程组组建时占用了某个 rank 的连接）：每次都在任何数据传输之前被拒绝，进程组在没有它的情况下组建完成",
    "starting {n} ranks: controller ...":
        "正在启动 {n} 个 rank：控制器……",
    "starting {n} {engines}: {up}/{n} up":
        "正在启动 {n} 个引擎：{up}/{n} 已就绪",
    "attaching to the engines of {what} ...":
        "正在连接 {what} 的引擎……",
    "starting {n} ranks: forming the gloo group":
        "正在启动 {n} 个 rank：组建 gloo 进程组",
    # --- report.py
    "{transport}, encrypted (CurveZMQ)":
        "{transport}，已加密（CurveZMQ）",
    "ipc socket files (only you can open them)":
        "ipc 套接字文件（只有你能打开）",
    "TCP on {ip} without encryption: any account of this machine can connect to its ports and read what cells print; an administrator can set {fix}":
        "{ip} 上的 TCP，未加密：本机任何账户都能连上它的端口，读到单元格打印的内容；管理员可以设置 {fix}",
    "{ipc} (or, with jupyter_client >= 8.10, {encrypted}) in jupyter_server_config.py":
        "jupyter_server_config.py 中的 {ipc}（jupyter_client >= 8.10 时也可以用 {encrypted}）",
    "socket files in the pool's private folder (no TCP port)":
        "进程池私有文件夹里的套接字文件（不开 TCP 端口）",
    "signed (HMAC-SHA256)":
        "已签名（HMAC-SHA256）",
    "NOT signed!":
        "未签名！",
    "encrypted (CurveZMQ)":
        "已加密（CurveZMQ）",
    "not encrypted (%ddp_start --encrypt, or a controller started with --IPController.enable_curve=True)":
        "未加密（%ddp_start --encrypt，或用 --IPController.enable_curve=True 启动控制器）",
    "TCP to {controller}, {signed}, {encrypted}":
        "TCP → {controller}，{signed}，{encrypted}",
    "the ranks live in a network namespace of their own: no other account can reach gloo's ports":
        "rank 运行在进程池自己的网络命名空间里：本机其他账户连不到 gloo 的端口",
    "on this machine's loopback ({why}): each rank answers gloo's accepts itself and closes another account's connection before gloo sees it; each group's connections are checked to be yours before it is used":
        "在本机回环接口上（{why}）：每个 rank 亲自应答 gloo 的 accept，另一个账户的连接在 gloo 看到之前就被关闭；每个组在使用前还会检查其连接都属于你",
    "; the accept gate is not up ({why})": "；accept 闸门未能启用（{why}）",
    "on this machine's loopback ({why}): before a group is used, each of its connections is checked to be yours (another account's is refused and the group formed again without it), and its ports then admit nobody":
        "在本机的回环接口上（{why}）：每个进程组在使用之前，都会检查它的每个连接是否属于你（其他账户的连接会被拒绝，进程组在没有它的情况下重新组建），之后它的端口不再接受任何人",
    "TCP between the hosts, unauthenticated (as in any PyTorch job): use a network you trust":
        "主机之间的 TCP，没有认证（与任何 PyTorch 作业一样）：只在可信的网络里使用",
    "a socket file in the pool's private folder":
        "进程池私有文件夹里的套接字文件",
    "{address}, signed, each message newer than the last, {encrypted}":
        "{address}，已签名，只收比上一条更新的消息，{encrypted}",
    "encrypted":
        "已加密",
    "not encrypted":
        "未加密",
    "{folder} (yours only)":
        "{folder}（只有你能写）",
    # --- diagnose.py
    "line {line}":
        "第 {line} 行",
    "stopped at a breakpoint (line {line})":
        "停在断点处（第 {line} 行）",
    "for {who}, stopped at a breakpoint":
        "等待停在断点处的 {who}",
    "waiting {s:.0f} s":
        "已等待 {s:.0f} 秒",
    "running":
        "运行中",
    "one|rank":
        "rank",
    "many|ranks":
        "rank",
    "collective mismatch: {calls}. Every rank of a group must call the same collectives, in the same order, with tensors of the same shape and dtype":
        "集合通信不匹配：{calls}。同一进程组里的每个 rank 必须以相同的顺序调用相同的集合通信，张量的形状和数据类型也必须相同",
    "{who} waited in {op} longer than the pool's collective timeout ({seconds:g} s, %ddp_start --timeout): ddplab cut it, as gloo would have failed it":
        "{who} 在 {op} 中等待的时间超过了进程池的集合通信超时（{seconds:g} 秒，%ddp_start --timeout）：ddplab 把它切断了，正如 gloo 本来会让它失败一样",
    "{who} called {call}":
        "{who} 调用了{call}",
    "{who} {wait} in {call} for {peers}, which finished the cell without calling it":
        "{who}{wait} 在{call}中等待 {peers}，而后者没有调用它就结束了这个单元格",
    "{who} {wait} in {call}; {peers}":
        "{who}{wait} 在{call}中等待；{peers}",
    "{who} {wait} in {call}":
        "{who}{wait} 在{call}中等待",
    "{who} called {call} and finished the cell":
        "{who} 调用了{call} 并结束了这个单元格",
    "{who} finished the cell without calling it":
        "{who} 没有调用它就结束了这个单元格",
    "{who} {wait} in {call} for {peers}, which do not run this cell (%%ddp --ranks): a collective on the default group needs every rank":
        "{who}{wait} 在{call}中等待 {peers}，而后者没有运行这个单元格（%%ddp --ranks）：默认进程组上的集合通信需要所有 rank",
    "at line {line}":
        "第 {line} 行",
    "{group} group":
        "{group}进程组",
    "default":
        "默认",
    "list|; ":
        "；",
    "init_process_group(...) in a cell: ddplab already formed this group (gloo, every rank), so the line did nothing here and can go (a script started by torchrun needs it)":
        "单元格中的 init_process_group(...)：ddplab 已经建立了这个进程组（gloo，所有 rank），所以这一行在这里什么也没做，可以删掉（由 torchrun 启动的脚本才需要它）",
    "init_process_group(...) asked for a group other than the one ddplab formed: use dist.new_group(ranks) for a group of some ranks, or %ddp_stop and %ddp_start for another pool":
        "init_process_group(...) 要求的进程组与 ddplab 建立的不同：要为部分 rank 建组请用 dist.new_group(ranks)，要换一个进程池请先 %ddp_stop 再 %ddp_start",
    "the cell called dist.destroy_process_group(): ddplab formed the group again ({ms:.0f} ms), so the next cell has one; objects made with the old group (a DDP model, a new_group) must be made again":
        "这个单元格调用了 dist.destroy_process_group()：ddplab 已重新建立进程组（{ms:.0f} 毫秒），下一个单元格可以照常使用；用旧进程组创建的对象（DDP 模型、new_group）需要重新创建",
    "a DistributedSampler was iterated again without set_epoch(epoch): every epoch gets the same order of samples; call sampler.set_epoch(epoch) at the start of each epoch":
        "DistributedSampler 在没有调用 set_epoch(epoch) 的情况下被再次遍历：每个 epoch 的样本顺序都一样；请在每个 epoch 开始时调用 sampler.set_epoch(epoch)",
    "waits":
        "",
    "wait":
        "",
    "list|, ":
        "、",
    "{op}({inside}) at line {line}":
        "第 {line} 行的 {op}({inside})",
    # --- export.py
    "A ddplab notebook, as a torchrun script":
        "一个 ddplab notebook，导出为 torchrun 脚本",
    "Exported by ddplab's %ddp_export from the %%ddp cells that ran successfully, in order.":
        "由 ddplab 的 %ddp_export 从成功运行过的 %%ddp 单元格按顺序导出。",
    "Run it with torchrun, e.g.:":
        "用 torchrun 运行它，例如：",
    "ddplab.log(...) and ddplab.phase(...) as in the notebook (points kept in memory)":
        "ddplab.log(...) 和 ddplab.phase(...) 与 notebook 中一样（数据点留在内存里）",
    "as the notebook's pool had it: {threads} thread(s) per rank":
        "与 notebook 的进程池相同：每个 rank {threads} 个线程",
    "from torchrun's environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT":
        "从 torchrun 设置的环境变量读取：RANK、WORLD_SIZE、MASTER_ADDR、MASTER_PORT",
    "left out by %ddp_export (works only in a notebook)":
        "%ddp_export 略去了这一行（只能在 notebook 中运行）",
    "a DDP model holds its group: the models go first (one left for the interpreter's exit, after its group, can abort the process)":
        "DDP 模型持有它的进程组：先释放模型（若留到解释器退出时、在进程组之后才销毁，进程可能异常中止）",
    # --- dashboard/html.py
    "dashboard|starting":
        "启动中",
    "dashboard|init":
        "初始化",
    "dashboard|ready":
        "就绪",
    "dashboard|running":
        "运行中",
    "dashboard|elapsed|running":
        "已运行",
    "dashboard|training":
        "训练中",
    "dashboard|done":
        "完成",
    "dashboard|failed":
        "失败",
    "dashboard|lost":
        "丢失",
    "dashboard|stopped":
        "已停止",
    "dashboard|rank":
        "进程 (rank)",
    "dashboard|state":
        "状态",
    "dashboard|step":
        "步数",
    "dashboard|loss":
        "损失",
    "dashboard|samples/s":
        "样本/秒",
    "dashboard|last heard":
        "上次消息",
    "dashboard|s ago":
        "秒前",
    "dashboard|ranks":
        "个进程",
    "dashboard|cell":
        "单元格",
    "dashboard|total":
        "合计",
    "dashboard|took":
        "用时",
    "dashboard|no points yet: call ddplab.log(loss=..., samples=...) in rank code":
        "还没有数据：在 rank 代码中调用 ddplab.log(loss=..., samples=...)",
    "dashboard|loss per rank, by step":
        "各进程损失（按步数）",
    "dashboard|samples/s per rank and total, by time (s)":
        "各进程与合计的样本/秒（按时间，秒）",
    "dashboard|output":
        "输出",
    "dashboard|pool stopped":
        "进程池已停止",
    # --- timeline
    "the timeline is recorded in the cells that follow (a cell: every step)":
        "之后的单元格会记录时间线（每个单元格：每一步）",
    "the timeline is recorded in the cells that follow (a cell: its first {first} steps, then one in {every})":
        "之后的单元格会记录时间线（每个单元格：前 {first} 步，之后每 {every} 步记录一步）",
    "{timed} steps timed: a cell's first {first}, then one in {every} (%ddp_timeline --every 1 times them all)":
        "记录了 {timed} 步：单元格的前 {first} 步，之后每 {every} 步记录一步（%ddp_timeline --every 1 记录每一步）",
    "the timeline is not recorded in the cells that follow":
        "之后的单元格不再记录时间线",
    "wrote {n} spans of {ranks} ranks to {path} (Chrome's trace format: Perfetto opens it)":
        "已把 {ranks} 个 rank 的 {n} 个时间段写入 {path}（Chrome 的 trace 格式：可以用 Perfetto 打开）",
    "no spans recorded: the cell ran no training step (forward, backward, collectives)":
        "没有记录到时间段：这个单元格没有运行训练步（前向、反向、集合通信）",
    "rank {rank} is the slowest: the others wait {ms:.0f} ms per step for it":
        "rank {rank} 最慢：其他 rank 每一步要等它 {ms:.0f} 毫秒",
    "communication, not a rank, is the bottleneck: {ms:.0f} ms of each {step:.0f} ms step goes to collectives":
        "瓶颈是通信，而不是某个 rank：每步 {step:.0f} 毫秒中有 {ms:.0f} 毫秒花在集合通信上",
    "no rank holds the others back, and communication takes {share:.0f}% of a step":
        "没有哪个 rank 拖慢其他 rank，通信占每一步的 {share:.0f}%",
    "timeline of cell {cell}: {n} spans from {ranks} ranks":
        "单元格 {cell} 的时间线：来自 {ranks} 个 rank 的 {n} 个时间段",
    "per step (ms): rank  compute  comm  wait  data  step":
        "每步（毫秒）：rank  计算  通信  等待  数据  整步",
    "no spans yet: a training step (forward, backward, a collective) draws here":
        "还没有时间段：训练步（前向、反向、集合通信）会画在这里",
    "timeline|forward": "前向",
    "timeline|backward": "反向",
    "timeline|optimizer": "优化器",
    "timeline|data": "数据",
    "timeline|comm": "通信",
    "timeline|wait": "等待",
    "timeline|rank": "rank",
    "timeline|compute": "计算",
    "timeline|step": "整步",
    "timeline|rss": "常驻内存",
    "timeline|params": "参数",
    "timeline|grads": "梯度",
    "timeline|optimizer state": "优化器状态",
    "timeline|buckets": "DDP 桶",
    "milliseconds per step": "每步的毫秒数",
    "memory per rank (MiB)": "每个 rank 的内存（MiB）",
    # --- stepping.py: ranks stopped at breakpoints
    '(ddp pdb) [ranks] command: ':
        '(ddp pdb) [rank] 命令：',
    '(left the debugger: the cell ends on this rank)':
        '（已离开调试器：这个单元格在该 rank 上结束）',
    '(no reply yet: the rank is still carrying the command out)':
        '（还没有回复：这个 rank 仍在执行该命令）',
    '(running)':
        '（运行中）',
    ', for {ranks}, stopped at a breakpoint':
        '，等待停在断点处的 rank {ranks}',
    ', in {function}':
        '，在 {function} 中',
    'cell line {line}':
        '单元格第 {line} 行',
    'line {line} of {file}, in {function}':
        '{file} 第 {line} 行，在 {function} 中',
    'no rank is stopped at a breakpoint':
        '没有 rank 停在断点处',
    'rank {rank}: running':
        'rank {rank}：运行中',
    'rank {rank}: running (line {line})':
        'rank {rank}：运行中（第 {line} 行）',
    'rank {rank}: stopped at a breakpoint, {place}':
        'rank {rank}：停在断点处，{place}',
    'rank {rank}: waiting in {op} ({seconds:.0f} s)':
        'rank {rank}：在 {op} 中等待（{seconds:.0f} 秒）',
    'rank {rank}: {state}':
        'rank {rank}：{state}',
    'ranks {ranks} are not stopped at a breakpoint (stopped: {stopped})':
        'rank {ranks} 没有停在断点处（停住的是：{stopped}）',
    'this front end has no input box: the stopped ranks continue (run the cell with %%ddp --bg and step it with %ddp_step)':
        '这个前端没有输入框：停住的 rank 继续运行（用 %%ddp --bg 运行这个单元格，再用 %ddp_step 单步调试）',
    "no answer within {seconds:g} s":
        "{seconds:g} 秒内没有回答",
    "{ranks} ranks need about {need:.2f} GiB and this session has {free:.2f} GiB free of its {limit:.2f} GiB: "
    "%ddp_start {fits} fits, or %ddp_start {ranks} --force starts them anyway":
        "{ranks} 个 rank 大约需要 {need:.2f} GiB，而这个会话的 {limit:.2f} GiB 中只剩 {free:.2f} GiB："
        "%ddp_start {fits} 放得下；或者用 %ddp_start {ranks} --force 照样启动",
    "{ranks} ranks need about {need:.2f} GiB and this session has {free:.2f} GiB free of its {limit:.2f} GiB: "
    "not one rank fits; close other notebooks (their kernels hold memory), or %ddp_start {ranks} --force starts "
    "them anyway":
        "{ranks} 个 rank 大约需要 {need:.2f} GiB，而这个会话的 {limit:.2f} GiB 中只剩 {free:.2f} GiB："
        "一个 rank 也放不下；请关掉其他笔记本（它们的内核占着内存），或者用 %ddp_start {ranks} --force 照样启动",
    "{ranks} ranks need about {need:.2f} GiB and this machine has {free:.2f} GiB free: %ddp_start {fits} fits, "
    "or %ddp_start {ranks} --force starts them anyway":
        "{ranks} 个 rank 大约需要 {need:.2f} GiB，而这台机器只剩 {free:.2f} GiB 可用："
        "%ddp_start {fits} 放得下；或者用 %ddp_start {ranks} --force 照样启动",
    "{ranks} ranks need about {need:.2f} GiB and this machine has {free:.2f} GiB free: not one rank fits; close "
    "other notebooks (their kernels hold memory), or %ddp_start {ranks} --force starts them anyway":
        "{ranks} 个 rank 大约需要 {need:.2f} GiB，而这台机器只剩 {free:.2f} GiB 可用：一个 rank 也放不下；"
        "请关掉其他笔记本（它们的内核占着内存），或者用 %ddp_start {ranks} --force 照样启动",
    "{ranks} ranks is more than this machine's {cores} cores can run (at most {most}): ask for fewer ranks":
        "{ranks} 个 rank 超出了这台机器 {cores} 个核能运行的数量（最多 {most} 个）：请少要一些 rank",
    "its engine was killed for memory (the kernel's OOM killer): this session may use {limit:.2f} GiB and held up "
    "to {peak:.2f} GiB":
        "它的引擎因内存不足被终止（内核的 OOM killer）：这个会话最多可用 {limit:.2f} GiB，最多时占用了 {peak:.2f} GiB",
    "its engine was killed for memory (the kernel's OOM killer): this session may use {limit:.2f} GiB":
        "它的引擎因内存不足被终止（内核的 OOM killer）：这个会话最多可用 {limit:.2f} GiB",
    "its engine was killed for memory (the kernel's OOM killer: this machine ran out)":
        "它的引擎因内存不足被终止（内核的 OOM killer：这台机器的内存用完了）",
    "the kernel's OOM killer ended {lost}: %ddp_restart may run out of memory again; %ddp_stop, then "
    "%ddp_start {fits}, fits this session":
        "内核的 OOM killer 终止了 {lost}：%ddp_restart 之后可能再次耗尽内存；先 %ddp_stop，再 %ddp_start {fits}，"
        "这个会话放得下",
    "the kernel's OOM killer ended {lost}: %ddp_restart may run out of memory again; close other notebooks "
    "(their kernels hold memory) first":
        "内核的 OOM killer 终止了 {lost}：%ddp_restart 之后可能再次耗尽内存；请先关掉其他笔记本（它们的内核占着内存）",
    # --- classroom.py: the report a learner hands in
    "ddplab report: {learner}":
        "ddplab 报告：{learner}",
    "Written {when}. {right} of {n} exercises right, {p} predictions.":
        "写于 {when}。{n} 道练习中答对 {right} 道，预测 {p} 次。",
    "Lesson {n}":
        "第 {n} 课",
    "Exercises":
        "练习",
    "Exercise":
        "练习",
    "Exercise {key}":
        "练习 {key}",
    "Attempts":
        "尝试次数",
    "Result":
        "结果",
    "Your answers":
        "你的答案",
    "right":
        "正确",
    "not yet right":
        "还不对",
    "right; attempts: {n}":
        "正确；尝试次数：{n}",
    "not yet right; attempts: {n}":
        "还不对；尝试次数：{n}",
    "Predictions":
        "预测",
    "Prediction":
        "预测",
    "You predicted":
        "你的预测",
    "Measured":
        "实测",
    "Difference":
        "差值",
    "Relative difference":
        "相对差值",
}
