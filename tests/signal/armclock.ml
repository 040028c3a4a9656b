(* armclock.ml — tests/signal program (linked library): threads that exist
   before Flamme.start must be sampled on their OWN CPU clock. A systhread
   blocks in Unix.read, a domain waits; after Flamme.start (from the main
   thread) the domain burns most of the CPU while main burns a little, then
   joins it. Default rate (99 Hz: the timer engine).
   Usage: armclock.exe OUTPUT HZ
   Prints "armclock: done". *)

let[@inline never] reader fd =
  let b = Bytes.create 1 in
  Sys.opaque_identity (Unix.read fd b 0 1)

let[@inline never] domain_work until = Sys.opaque_identity (Work.burn until) + 1
let[@inline never] main_work until = Sys.opaque_identity (Work.burn until) + 1

let () =
  let output = Sys.argv.(1) and hz = int_of_string Sys.argv.(2) in
  let r, w = Unix.pipe () in
  let t = Thread.create (fun () -> ignore (reader r)) () in
  let go = Atomic.make 0. in
  let d =
    Domain.spawn (fun () ->
        while Atomic.get go = 0. do Domain.cpu_relax () done;
        domain_work (Atomic.get go))
  in
  Unix.sleepf 0.1 (* the reader is in read() *);
  Flamme.start ~hz ~output ();
  let t0 = Sys.time () in
  (* Process CPU time: the domain runs alone after main's short share. *)
  Atomic.set go (t0 +. 1.5);
  ignore (main_work (t0 +. 0.3));
  ignore (Domain.join d);
  Flamme.stop ();
  ignore (Unix.write_substring w "x" 0 1);
  Thread.join t;
  print_endline "armclock: done"
