(* tests/engine/stitch.ml — recursion deep enough that the CPU budget
   shortens most samples at 999 Hz, in phases of ~80 ms that never call each
   other: down_a under via_1 working in spin_1, down_a under via_2 working
   in spin_2 (the same down_a frames at the same addresses, but for the
   return address into via_1 or via_2 at the root side), then down_b working
   in spin_b; each spin_ calls work. Each recursion is DEPTH frames deep (not
   tail calls: every frame stays).
   A shortened sample completed from an earlier whole walk must get the
   frames of its own phase, exactly DEPTH of them: a stale root side would
   show spin_2 under via_1, down_a under down_b, or the wrong count.
   Usage: stitch.exe [SECONDS] [DEPTH]  (default 1.0 s of CPU, 3000). *)

let seconds = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let depth = if Array.length Sys.argv > 2 then int_of_string Sys.argv.(2) else 3000

let[@inline never] work m k =
  let acc = ref k in
  for j = 1 to 200_000 do
    acc := (!acc * m) + j
  done;
  !acc land 1

(* Not tail calls: each stays on the stack, under its own phase. *)
let[@inline never] spin_1 k = 1 + work 31 k
let[@inline never] spin_2 k = 1 + work 29 k
let[@inline never] spin_b k = 1 + work 17 k

let rec down_a n f k = if n = 0 then f k else 1 + down_a (n - 1) f k
let rec down_b n k = if n = 0 then spin_b k else 1 + down_b (n - 1) k
let[@inline never] via_1 k = 1 + down_a depth spin_1 k
let[@inline never] via_2 k = 1 + down_a depth spin_2 k

let () =
  let t0 = Sys.time () in
  let sum = ref 0 and phases = ref 0 in
  while Sys.time () -. t0 < seconds do
    (* 400 bottoms a phase: ~80 ms each *)
    for k = 1 to 400 do
      sum := !sum + via_1 k
    done;
    for k = 1 to 400 do
      sum := !sum + via_2 k
    done;
    for k = 1 to 400 do
      sum := !sum + down_b depth k
    done;
    incr phases
  done;
  Printf.printf "stitch: %d phases, checksum %d\n" !phases (!sum land 0xffff)
