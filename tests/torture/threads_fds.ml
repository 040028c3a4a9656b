(* threads_fds.ml — 300 threads alive at once (run with a descriptor limit
   of 256), then the main thread opens pipes and select()s on them: the
   agent's descriptors (a perf event per thread, unchecked) must neither
   take the program's numbers nor use up its limit.
   torture-libs: unix threads *)
let () =
  let m = Mutex.create () and c = Condition.create () and go = ref false in
  let wait () = Mutex.lock m; while not !go do Condition.wait c m done; Mutex.unlock m in
  let ts = List.init 300 (fun _ -> Thread.create wait ()) in
  Thread.delay 0.3;
  let pipes = List.init 20 (fun _ -> Unix.pipe ()) in
  let writers = List.map snd pipes in
  let _, ready, _ = Unix.select [] writers [] 1.0 in
  Printf.printf "pipes: %d, ready for writing: %d\n%!" (List.length pipes) (List.length ready);
  Mutex.lock m; go := true; Condition.broadcast c; Mutex.unlock m;
  List.iter Thread.join ts;
  print_endline "joined 300 threads"
