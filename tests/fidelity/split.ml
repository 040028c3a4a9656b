(* tests/fidelity/split.ml — three functions taking 50%, 30% and 20% of the
   CPU by construction: each round calls [share_a], [share_b] and [share_c]
   with 5, 3 and 2 units of the same work function. The program also times
   each share with the thread CPU clock and prints what it measured, so a
   deviation can be told apart from an unequal machine.
   Usage: split.exe [SCALE]  (SCALE multiplies the amount of work; default 1) *)

external thread_cputime : unit -> float = "fid_thread_cputime"

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let scaled n = max 1 (int_of_float (scale *. float_of_int n))

(* One unit of work, about 0.3 ms. *)
let[@inline never] unit_work seed =
  let acc = ref seed in
  for i = 1 to 300_000 do
    acc := (!acc * 31) + i
  done;
  !acc

let[@inline never] units n seed =
  let acc = ref seed in
  for _ = 1 to n do acc := unit_work !acc done;
  !acc

(* Not tail calls: a tail call would replace the share's frame by [units]. *)
let[@inline never] share_a seed = units 5 seed + 1
let[@inline never] share_b seed = units 3 seed + 1
let[@inline never] share_c seed = units 2 seed + 1

let () =
  let t = Array.make 3 0.0 in
  let acc = ref 0 in
  let rng = Random.State.make [| 42 |] in
  let timed i f =
    let t0 = thread_cputime () in
    acc := f !acc;
    t.(i) <- t.(i) +. (thread_cputime () -. t0)
  in
  for _ = 1 to scaled 900 do
    (* A shuffled order per round: a fixed order repeats with a period that
       a fixed sampling period can lock onto (aliasing). *)
    match Random.State.int rng 6 with
    | 0 -> timed 0 share_a; timed 1 share_b; timed 2 share_c
    | 1 -> timed 0 share_a; timed 2 share_c; timed 1 share_b
    | 2 -> timed 1 share_b; timed 0 share_a; timed 2 share_c
    | 3 -> timed 1 share_b; timed 2 share_c; timed 0 share_a
    | 4 -> timed 2 share_c; timed 0 share_a; timed 1 share_b
    | _ -> timed 2 share_c; timed 1 share_b; timed 0 share_a
  done;
  ignore (Sys.opaque_identity !acc);
  let total = t.(0) +. t.(1) +. t.(2) in
  Printf.printf "split: measured a %.2f%% b %.2f%% c %.2f%% thread_cpu %.3f\n"
    (100. *. t.(0) /. total) (100. *. t.(1) /. total) (100. *. t.(2) /. total) (thread_cputime ())
