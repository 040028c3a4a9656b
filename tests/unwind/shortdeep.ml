(* shortdeep.ml — a short program whose work sits under a deep recursion,
   as a compiler's passes over a nested expression or a recursive-descent
   reader's do: each round builds a 120-level nested term and evaluates
   it, the work at its leaf, with a little work at the top level between
   rounds. At 999 Hz it runs ~150 samples: before, the handler's budget let
   few of them be walked whole (0-7% of the leaf's: its first walks, cold,
   and the writer's early costs spent it on short walks, which replay
   nothing, and a sample at the top level replaced the deep stack the
   others replay).

   Usage: shortdeep.exe [SECONDS] (0.15 of CPU). Prints a checksum. *)

type term = Lit of int | Neg of term | Add of int * term

let rec nest n = if n = 0 then Lit 7 else if n land 1 = 0 then Neg (nest (n - 1)) else Add (n, nest (n - 1))

(* The leaf's work: a hash of its value, long enough to be sampled. *)
let[@inline never] leaf_work k =
  let h = ref k in
  for i = 1 to 20_000 do
    h := ((!h * 31) + i) land 0xffffff
  done;
  !h

let[@inline never] rec eval = function
  | Lit k -> leaf_work k
  | Neg t -> - (eval t)
  | Add (k, t) -> k + eval t

let[@inline never] top_work round =
  let s = ref round in
  for i = 1 to 2_000 do
    s := (!s lxor i) * 3 land 0xffff
  done;
  !s

let () =
  let seconds = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 0.15 in
  let t0 = Sys.time () in
  let sum = ref 0 and round = ref 0 in
  while Sys.time () -. t0 < seconds do
    sum := !sum + eval (nest 120) + top_work !round;
    incr round
  done;
  Printf.printf "%d\n" (!sum land 0xffff)
