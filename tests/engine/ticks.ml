(* tests/engine/ticks.ml — a program in step with the kernel's tick: each
   time the coarse clock moves (once a tick) it runs [after_tick] for a
   tenth of a tick, then [before_tick] until the clock moves again: about
   10% / 90% of its CPU time when it has a CPU to itself (it measures and
   prints its own split: a preempted thread spends less of it in
   [after_tick]). A sampler that fires at ticks finds it at one end of the
   tick, in one of them, nearly every time.
   Usage: ticks.exe [SECONDS]  (default 1.5) *)

external coarse_ns : unit -> int = "ticks_coarse_ns" [@@noalloc]
external fine_ns : unit -> int = "ticks_fine_ns" [@@noalloc]
external cpu_ns : unit -> int = "ticks_cpu_ns" [@@noalloc]

let seconds = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.5
let spins = ref 0

(* Busy until the fine clock reaches [until]. *)
let[@inline never] after_tick until =
  while fine_ns () < until do incr spins done

(* Busy until the coarse clock leaves [t]. *)
let[@inline never] before_tick t =
  while coarse_ns () = t do incr spins done

let () =
  (* A tick: the coarse clock's step, between two of its moves. *)
  before_tick (coarse_ns ());
  let t1 = coarse_ns () in
  before_tick t1;
  let tick = coarse_ns () - t1 in
  let stop = fine_ns () + int_of_float (seconds *. 1e9) in
  let ticks = ref 0 and after = ref 0 and before = ref 0 in
  while fine_ns () < stop do
    let t = coarse_ns () in
    let c0 = cpu_ns () in
    after_tick (fine_ns () + tick / 10);
    let c1 = cpu_ns () in
    before_tick t;
    let c2 = cpu_ns () in
    after := !after + (c1 - c0);
    before := !before + (c2 - c1);
    incr ticks
  done;
  Printf.printf "ticks: %d ticks of %d us, after_tick %.1f%% of the CPU time\n" !ticks (tick / 1000)
    (100. *. float_of_int !after /. float_of_int (max 1 (!after + !before)))
