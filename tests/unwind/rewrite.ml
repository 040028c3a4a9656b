(* tests/unwind/rewrite.ml — a symbolic algebra simplifier: terms over
   named variables, hash-consed through a Hashtbl (structural hashing and
   equality: caml_hash, compare_val, caml_string_equal), rewrite rules
   applied bottom-up to a fixpoint, a memo table updated in place
   (caml_modify), and environments as association lists of strings.
   Usage: rewrite.exe [SCALE] *)

type term =
  | Var of string
  | Const of int
  | Add of term * term
  | Mul of term * term
  | Neg of term
  | Pow of term * int

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let rounds = max 1 (int_of_float (scale *. 12000.))

(* Hash-consing: one physical copy of each term. *)
let table : (term, term) Hashtbl.t = Hashtbl.create 4096
let hc t = match Hashtbl.find_opt table t with Some u -> u | None -> Hashtbl.add table t t; t

let vars = [| "x"; "y"; "z"; "alpha"; "beta"; "gamma"; "delta" |]

let rec gen seed d =
  if d = 0 then (if seed land 3 = 0 then Const (seed mod 5) else Var vars.(seed mod Array.length vars))
  else
    match seed mod 4 with
    | 0 -> Add (gen (seed * 7 + 1) (d - 1), gen (seed * 13 + 3) (d - 1))
    | 1 -> Mul (gen (seed * 5 + 2) (d - 1), gen (seed * 11 + 1) (d - 1))
    | 2 -> Neg (gen (seed * 3 + 1) (d - 1))
    | _ -> Pow (gen (seed * 17 + 5) (d - 1), seed mod 3)

let[@inline never] step t =
  match t with
  | Add (Const 0, a) | Add (a, Const 0) | Mul (Const 1, a) | Mul (a, Const 1) -> a
  | Mul (Const 0, _) | Mul (_, Const 0) -> Const 0
  | Add (Const a, Const b) -> Const (a + b)
  | Mul (Const a, Const b) -> Const (a * b)
  | Neg (Neg a) -> a
  | Neg (Const a) -> Const (-a)
  | Pow (_, 0) -> Const 1
  | Pow (a, 1) -> a
  | Add (a, b) when a = b -> Mul (Const 2, a)
  | Add (Var a, Var b) when String.compare a b > 0 -> Add (Var b, Var a)
  | Mul (a, Add (b, c)) -> Add (Mul (a, b), Mul (a, c))
  | t -> t

let rec simplify t =
  let t = match t with
    | Add (a, b) -> Add (simplify a, simplify b)
    | Mul (a, b) -> Mul (simplify a, simplify b)
    | Neg a -> Neg (simplify a)
    | Pow (a, n) -> Pow (simplify a, n)
    | t -> t in
  let t' = hc (step t) in
  if t' == t || t' = t then t' else simplify t'

let memo : (string, int) Hashtbl.t = Hashtbl.create 256

let[@inline never] rec eval env = function
  | Var v -> (try List.assoc v env with Not_found ->
      match Hashtbl.find_opt memo v with Some n -> n | None -> Hashtbl.replace memo v 1; 1)
  | Const n -> n
  | Add (a, b) -> eval env a + eval env b
  | Mul (a, b) -> eval env a * eval env b
  | Neg a -> - (eval env a)
  | Pow (a, n) -> let x = eval env a in if n = 2 then x * x else x

let () =
  let acc = ref 0 in
  let cache = Array.make 512 (Const 0) in
  for r = 1 to rounds do
    let t = gen r 9 in
    let s = simplify t in
    cache.(r land 511) <- s;
    let env = [ ("x", r); ("y", r + 1); (vars.(r mod 7), 3) ] in
    acc := !acc + eval env s;
    if r mod 50 = 0 then Hashtbl.reset table
  done;
  Printf.printf "rewrite: %d %d\n" (!acc land 0xffff) (Hashtbl.length memo)
