(* nested.ml — tests/signal program (run with the agent preloaded): a C
   SIGALRM handler on OCaml's alternate signal stack burns CPU at every
   10 ms tick (nested_stubs.c), so the agent's sample signals come inside
   it, on the same stack (8 KiB up to OCaml 5.4, sysconf's size from
   5.5). Burns SECONDS of CPU in all, IN_HANDLER
   seconds of each tick in the handler. With "main-stack", the handler is
   installed without SA_ONSTACK and runs on the interrupted stack instead;
   with "deep", the handler takes all but 1.5 KiB of its alternate stack
   before it burns (nested_stubs.c).
   Usage: nested.exe SECONDS IN_HANDLER [main-stack | deep]
   Prints "nested: ticks=N cpu=SECONDS". *)

external start : float -> bool -> bool -> unit = "nested_start"
external stop : unit -> int = "nested_stop"

let[@inline never] burn until = Sys.opaque_identity (Work.burn until) + 1

let () =
  let secs = float_of_string Sys.argv.(1) in
  let t0 = Sys.time () in
  let mode = if Array.length Sys.argv > 3 then Sys.argv.(3) else "" in
  start (float_of_string Sys.argv.(2)) (mode = "main-stack") (mode = "deep");
  ignore (Sys.opaque_identity (burn (t0 +. secs)));
  let n = stop () in
  Printf.printf "nested: ticks=%d cpu=%.3f\n" n (Sys.time () -. t0)
