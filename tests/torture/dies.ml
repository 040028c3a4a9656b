(* dies.ml — works for about half a second, then ends the way its argument
   says: exit (status 4), uncaught (exception), _exit (status 5), pipe (write
   to a pipe nobody reads: SIGPIPE), abort, segv (NULL store in C), bus
   (touch an mmap'd page past the end of its file), fpe (integer division
   by zero in C), term (kill itself with SIGTERM). Every way must leave a
   complete profile saying how the run ended, and end exactly as alone.
   Usage: dies.exe HOW
   torture-libs: unix *)
external c_abort : unit -> unit = "torture_abort"
external c_segv : unit -> unit = "torture_segv"
external c_bus : unit -> unit = "torture_bus"
external c_fpe : int -> int = "torture_fpe"

(* Half a second of CPU whatever the machine's speed (a count of
   iterations was 0.08 s on a fast one: too few ticks for the timer
   engines' sample count). *)
let[@inline never] work_before_end secs =
  let acc = ref 5 in
  while Sys.time () < secs do
    for i = 1 to 1_000_000 do acc := (!acc * 17 + i) land 0xffffff done
  done;
  !acc

let () =
  let how = Sys.argv.(1) in
  let oc = open_out "before.txt" in
  (* What it writes must not depend on how many iterations fit. *)
  ignore (Sys.opaque_identity (work_before_end 0.5));
  output_string oc "worked\n";
  close_out oc;
  print_endline ("ending by " ^ how);
  match how with
  | "exit" -> exit 4
  | "uncaught" -> failwith "uncaught on purpose"
  | "_exit" -> Unix._exit 5
  | "pipe" ->
    let r, w = Unix.pipe () in
    Unix.close r;
    ignore (Unix.write_substring w "x" 0 1);
    print_endline "not reached"
  | "abort" -> c_abort ()
  | "segv" -> c_segv ()
  | "bus" -> c_bus ()
  | "fpe" -> print_int (c_fpe 0)
  | "term" -> Unix.kill (Unix.getpid ()) Sys.sigterm; Unix.sleepf 5.0
  | _ -> prerr_endline "dies.exe: unknown HOW"; exit 2
