(* tests/engine/memo.ml — one recursion that goes DEEP frames down, then
   SHALLOW, from the same call site, ~50 ms each in turn, and at its bottom
   spins in C through a [@@noalloc] external (memo_stubs.c): memo_spin_deep
   at the deep bottom, memo_spin_shallow at the shallow one.
   A [@@noalloc] call switches to the C stack without writing to the OCaml
   one: at the shallow bottom, the OCaml stack below the live frames still
   holds the deep recursion's return addresses, each in the slot it had. A
   walk that took the deep stack's older frames from there (the thread's
   last whole stack, agent/memo.h) would give a memo_spin_shallow sample
   DEEP frames of recursion instead of SHALLOW.
   Usage: memo.exe [SECONDS] [DEEP] [SHALLOW]  (1.0 s of CPU, 2000, 1000). *)

external spin : bool -> int -> unit = "memo_spin" [@@noalloc]

let seconds = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let deep = if Array.length Sys.argv > 2 then int_of_string Sys.argv.(2) else 2000
let shallow = if Array.length Sys.argv > 3 then int_of_string Sys.argv.(3) else 1000

(* Not a tail call: each level stays on the stack. *)
let rec down n d = if n = 0 then (spin d 20_000; 0) else 1 + down (n - 1) d

let () =
  let t0 = Sys.time () in
  let sum = ref 0 and turns = ref 0 in
  while Sys.time () -. t0 < seconds do
    for i = 1 to 200 do
      (* the same call site for both depths: only the depth differs *)
      let n, d = if i <= 100 then (deep, true) else (shallow, false) in
      sum := !sum + down n d
    done;
    incr turns
  done;
  Printf.printf "memo: %d turns, checksum %d\n" !turns !sum
