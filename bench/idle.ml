(* idle.ml — bench/idle_bench.py's program: the cost of interposed blocking
   calls and of short-lived threads, printed as "poll_ns=X read_ns=X
   open_ns=X vmsize0_kb=N vmsize100_kb=N"; with PAUSE, then sleeps PAUSE seconds (a
   program waiting). Usage: idle.exe CALLS [PAUSE] *)

external poll_ns : int -> float = "idle_poll_ns"
external read_ns : int -> float = "idle_read_ns"
external open_ns : int -> float = "idle_open_ns"
external vmsize_after : int -> int = "idle_threads_vmsize"
external pause : float -> unit = "idle_pause"

let () =
  let n = int_of_string Sys.argv.(1) in
  let v0 = vmsize_after 0 in
  let p = poll_ns n and r = read_ns n and o = open_ns (n / 4) in
  let v1 = vmsize_after 100 in
  Printf.printf "poll_ns=%.0f read_ns=%.0f open_ns=%.0f vmsize0_kb=%d vmsize100_kb=%d\n%!" p r o v0 v1;
  if Array.length Sys.argv > 2 then pause (float_of_string Sys.argv.(2))
