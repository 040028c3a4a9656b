(* tests/unwind/gcalloc.ml — allocation-heavy code on two domains: the
   binary-trees benchmark (short-lived and long-lived trees), a Map rebuilt
   from lists, strings built with Buffer and ( ^ ), and float arrays that
   go straight to the major heap. Most samples fall in the minor and major
   collectors, caml_alloc_shr / caml_shared_try_alloc and the write barrier.
   Usage: gcalloc.exe [SCALE] *)

module IM = Map.Make (Int)

type tree = Leaf | Node of tree * tree

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let rounds = max 1 (int_of_float (scale *. 2.))

let rec make d = if d = 0 then Node (Leaf, Leaf) else Node (make (d - 1), make (d - 1))
let rec check = function Leaf -> 0 | Node (l, r) -> 1 + check l + check r

let[@inline never] trees depth =
  let long_lived = make depth in
  let acc = ref 0 in
  let d = ref 4 in
  while !d <= depth do
    let iters = 1 lsl (depth - !d + 4) in
    for _ = 1 to iters do acc := !acc + check (make !d) done;
    d := !d + 2
  done;
  !acc + check long_lived

let[@inline never] maps n =
  let m = List.fold_left (fun m i -> IM.add ((i * 7919) mod n) (string_of_int i) m) IM.empty
            (List.init n Fun.id) in
  IM.fold (fun k v acc -> acc + k + String.length v) m 0

let[@inline never] strings n =
  let b = Buffer.create 16 in
  for i = 1 to n do
    Buffer.add_string b ("item" ^ string_of_int i ^ ";");
    if Buffer.length b > 4096 then Buffer.clear b
  done;
  Buffer.length b

let[@inline never] floats n =
  let a = Array.init n (fun i -> float_of_int i) in
  let keep = ref [] in
  for i = 0 to n - 1 do
    if i mod 64 = 0 then keep := Array.sub a i (min 64 (n - i)) :: !keep
  done;
  List.fold_left (fun s x -> s +. x.(0)) 0.0 !keep

let[@inline never] one_round r =
  trees 16 + maps 60_000 + strings 100_000 + int_of_float (floats (300_000 + r))

let () =
  let other = Domain.spawn (fun () ->
      let s = ref 0 in
      for r = 1 to rounds do s := !s + one_round r done;
      !s) in
  let s = ref 0 in
  for r = 1 to rounds do s := !s + one_round r done;
  Printf.printf "gcalloc: %d\n" ((!s + Domain.join other) land 0xffff)
