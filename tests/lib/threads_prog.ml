(* threads_prog.ml — tests/lib program linked with the systhreads library as
   well: a systhread created BEFORE Flamme.start waits, then works while the
   profile runs (thread_work), as does the main thread (main_work).
   Usage: threads_prog.exe OUTPUT HZ *)

let[@inline never] thread_work until = Sys.opaque_identity (Work.burn until) + 1
let[@inline never] main_work until = Sys.opaque_identity (Work.burn until) + 1

let () =
  let output = Sys.argv.(1) and hz = int_of_string Sys.argv.(2) in
  let m = Mutex.create () and c = Condition.create () in
  let go = ref None in
  let t =
    Thread.create
      (fun () ->
        Mutex.lock m;
        while !go = None do Condition.wait c m done;
        let until = Option.get !go in
        Mutex.unlock m;
        ignore (thread_work until))
      ()
  in
  Flamme.with_profile ~hz ~output (fun () ->
      (* One domain: the two threads take turns on ~1.2 s of CPU. *)
      let until = Sys.time () +. 1.2 in
      Mutex.lock m;
      go := Some until;
      Condition.broadcast c;
      Mutex.unlock m;
      ignore (main_work until);
      Thread.join t);
  print_endline "threads_prog: done"
